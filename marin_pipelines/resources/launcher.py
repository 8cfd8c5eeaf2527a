"""Where training and evaluation run: a subprocess here (``LocalLauncher``) or a pod on Kubernetes
(``K8sLauncher``).

Both run the package's entry points under Dagster Pipes: ``python -m marin_pipelines.train --config FILE
--data CACHE --out DIR`` streams its logged steps back while it trains and writes the checkpoint into
``--out``; ``python -m marin_pipelines.evals --checkpoint DIR ... --out FILE`` sends its progress and a
summary, and writes the results JSON to ``--out``. On Kubernetes those paths must be shared with the pod
(the store on a mounted volume, see ``volume_claim``), exactly as the artifact store is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from dagster import AssetExecutionContext, ConfigurableResource, PipesSubprocessClient
from pydantic import Field, model_validator

from marin_pipelines.evals.checkpoint_eval import EvalConfig, with_heldout

TRAIN_COMMAND = ("-m", "marin_pipelines.train")
EVAL_COMMAND = ("-m", "marin_pipelines.evals")
# lm-eval's and datasets' progress bars: an evaluation of the shipped tasks takes seconds, its bars are noise
QUIET_EVAL_ENV = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def train_args(config_file: Path, data_dir: Path, out_dir: Path, progress_bar: bool = False) -> list[str]:
    args = [*TRAIN_COMMAND, "--config", str(config_file), "--data", str(data_dir), "--out", str(out_dir)]
    return args if progress_bar else [*args, "--quiet"]


class LauncherResource(ConfigurableResource):
    """Runs training and evaluation somewhere; each returns the Pipes custom messages the run reported."""

    env: dict[str, str] = Field(default_factory=dict, description="extra environment of the launched process")
    compilation_cache: str | None = Field(
        None,
        description="a folder for JAX's persistent compilation cache, shared by the launched runs: a run "
        "with the model and shapes of an earlier one skips XLA compilation (seconds per evaluation on a CPU)",
    )

    def child_env(self) -> dict[str, str]:
        """``env``, on top of the compilation cache's settings (every compiled program is kept)."""
        if not self.compilation_cache:
            return dict(self.env)
        cache = {
            "JAX_COMPILATION_CACHE_DIR": self.compilation_cache,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        }
        return {**cache, **self.env}

    def launch(
        self, context: AssetExecutionContext, args: list[str], env: dict[str, str] | None = None
    ) -> list[Any]:
        """``python *args`` under Dagster Pipes, wherever this launcher runs things (``env`` on top)."""
        raise NotImplementedError

    def progress_bar(self) -> bool:
        """Whether the training child draws its progress bar (where someone watches a terminal)."""
        return False

    def train(
        self, context: AssetExecutionContext, config_file: Path, data_dir: Path, out_dir: Path
    ) -> list[Any]:
        return self.launch(context, train_args(config_file, data_dir, out_dir, self.progress_bar()))

    def evaluate(
        self,
        context: AssetExecutionContext,
        checkpoint_dir: Path,
        tokenizer_file: Path,
        bpb_sets: dict[str, list[str]],
        config: EvalConfig,
        batch_size: int,
        out_file: Path,
    ) -> list[Any]:
        """Bits per byte on ``bpb_sets`` (name -> caches / text) and ``config``'s held-out sets, and
        ``config``'s lm-eval tasks, written to ``out_file`` as ``marin-pipelines eval`` writes them
        (the sets as ``--bpb NAME=PATH,...``)."""
        args = [*EVAL_COMMAND, "--checkpoint", str(checkpoint_dir), "--tokenizer", str(tokenizer_file)]
        sets = with_heldout(bpb_sets, config)
        if sets:
            args += ["--bpb", *(f"{name}={','.join(paths)}" for name, paths in sets.items())]
        if config.tasks:
            args += ["--tasks", ",".join(config.tasks)]
        for folder in config.include_paths:
            args += ["--include-path", folder]
        if config.limit is not None:
            args += ["--limit", str(config.limit)]
        args += ["--batch-size", str(batch_size), "--out", str(out_file)]
        return self.launch(context, args, QUIET_EVAL_ENV)


class LocalLauncher(LauncherResource):
    """A subprocess on this machine (CPU JAX unless the machine has an accelerator): the default."""

    python: str = Field(default=sys.executable, description="interpreter that has marin_pipelines installed")
    compilation_cache: str | None = str(Path.cwd() / ".marin" / "jax_cache")

    def progress_bar(self) -> bool:
        return sys.stderr.isatty()  # `make demo` in a terminal: the bar; tests and logs: none

    def launch(
        self, context: AssetExecutionContext, args: list[str], env: dict[str, str] | None = None
    ) -> list[Any]:
        client = PipesSubprocessClient(env={**(env or {}), **self.child_env()})
        invocation = client.run(context=context, command=[self.python, *args])
        return invocation.get_custom_messages()


class K8sLauncher(LauncherResource):
    """A pod on Kubernetes (GKE): TPU slices, NVIDIA GPUs or CPU, through ``PipesK8sClient``."""

    image: str = Field(description="container image with marin_pipelines installed")
    namespace: str = "default"
    service_account: str | None = Field(None, description="Kubernetes service account (Workload Identity)")
    accelerator: Literal["cpu", "tpu", "gpu"] = "cpu"
    tpu_type: str | None = Field(None, description="GKE TPU accelerator, e.g. tpu-v5-lite-podslice")
    tpu_topology: str | None = Field(None, description="TPU slice topology, e.g. 2x4")
    gpu_type: str | None = Field(None, description="GKE GPU accelerator label, e.g. nvidia-h100-80gb")
    chips: int = Field(1, gt=0, description="TPU chips or GPUs requested by the pod")
    cpu: str = "4"
    memory: str = "16Gi"
    secret_env: dict[str, str] = Field(
        default_factory=dict, description="env var -> 'secret-name/key', e.g. WANDB_API_KEY: wandb/api-key"
    )
    volume_claim: str | None = Field(None, description="PersistentVolumeClaim holding the store")
    store_mount: str | None = Field(None, description="where the claim is mounted: the store root's path")

    @model_validator(mode="after")
    def _check_accelerator(self) -> K8sLauncher:
        if self.accelerator == "tpu" and not (self.tpu_type and self.tpu_topology):
            raise ValueError("accelerator 'tpu' needs tpu_type and tpu_topology")
        if bool(self.volume_claim) != bool(self.store_mount):
            raise ValueError("volume_claim and store_mount go together")
        for name, ref in self.secret_env.items():
            if ref.count("/") != 1:
                raise ValueError(f"secret_env[{name!r}] must be 'secret-name/key', got {ref!r}")
        return self

    def pod_spec(self) -> dict[str, Any]:
        """The base pod spec (Kubernetes API field names) for PipesK8sClient; the client adds the command."""
        limits = {"cpu": self.cpu, "memory": self.memory}
        selector: dict[str, str] = {}
        if self.accelerator == "tpu":
            limits["google.com/tpu"] = str(self.chips)
            selector = {
                "cloud.google.com/gke-tpu-accelerator": str(self.tpu_type),
                "cloud.google.com/gke-tpu-topology": str(self.tpu_topology),
            }
        elif self.accelerator == "gpu":
            limits["nvidia.com/gpu"] = str(self.chips)
            if self.gpu_type:
                selector = {"cloud.google.com/gke-accelerator": self.gpu_type}
        env = [{"name": k, "value": v} for k, v in self.child_env().items()]
        env += [
            {
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": ref.split("/")[0], "key": ref.split("/")[1]}},
            }
            for name, ref in self.secret_env.items()
        ]
        container: dict[str, Any] = {
            "name": "marin",
            "image": self.image,
            "env": env,
            "resources": {"requests": dict(limits), "limits": limits},
        }
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if self.volume_claim:
            container["volumeMounts"] = [{"name": "store", "mountPath": self.store_mount}]
            spec["volumes"] = [{"name": "store", "persistentVolumeClaim": {"claimName": self.volume_claim}}]
        if selector:
            spec["nodeSelector"] = selector
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        return spec

    def launch(
        self, context: AssetExecutionContext, args: list[str], env: dict[str, str] | None = None
    ) -> list[Any]:
        from dagster_k8s import PipesK8sClient

        invocation = PipesK8sClient().run(
            context=context,
            image=self.image,
            command=["python", *args],
            namespace=self.namespace,
            base_pod_spec=self.pod_spec(),
            env=env,
        )
        return invocation.get_custom_messages()
