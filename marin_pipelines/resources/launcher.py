"""Where training, evaluation and sweeps run: a subprocess here (``LocalLauncher``) or a pod on Kubernetes
(``K8sLauncher``).

Both run the command line under Dagster Pipes on one config file that they write beside the child's
output (``marin_pipelines/launch_config.py``): ``python -m marin_pipelines.cli train --step-config FILE``
(or ``sft``) streams its logged steps back while it trains into its folder; ``python -m
marin_pipelines.cli eval --step-config FILE`` sends its progress and a summary, and writes the results JSON;
``python -m marin_pipelines.cli sweep --step-config FILE`` trains a sweep's trials (or finishes one of them)
and writes its outcome.
On Kubernetes those paths must be shared with the pod: a ``gs://`` store, or the store on a mounted volume
(see ``volume_claim``), exactly as the artifact store is.

``pool()`` names the Dagster concurrency pool of the launcher's accelerator, so that the instance can
limit how many runs use one kind of accelerator at once.
"""

from __future__ import annotations

import math
import os
import re
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from dagster import AssetExecutionContext, ConfigurableResource, PipesSubprocessClient
from pydantic import Field, ValidationInfo, field_validator, model_validator

from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.orphans import launched_env
from marin_pipelines.resources.multi_host import HostGroup, env_list, jobset
from marin_pipelines.store import STORE_ROOT
from marin_pipelines.sweeps.launch_config import SweepLaunch
from marin_pipelines.train.compilation_cache import compilation_cache_env, default_compilation_cache
from marin_pipelines.train.launch_config import TrainingLaunch

# lm-eval's and datasets' progress bars: an evaluation of the shipped tasks takes seconds, its bars are noise
QUIET_EVAL_ENV = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
# the run worker's own pod, from the downward API (deploy/helm/values.yaml: runK8sConfig.containerConfig)
RUN_POD = ("MARIN_RUN_POD_NAME", "MARIN_RUN_POD_UID", "MARIN_RUN_POD_NAMESPACE")
POOL_PREFIX = "accelerator/"
QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
TOPOLOGY = re.compile(r"\d+(x\d+){1,2}")


class LauncherResource(ConfigurableResource):
    """Runs training, evaluation and sweeps somewhere; each returns the Pipes custom messages the run
    reported."""

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
        return {**compilation_cache_env(self.compilation_cache), **self.env}

    def launch(
        self, context: AssetExecutionContext, args: list[str], env: dict[str, str] | None = None
    ) -> list[Any]:
        """``python *args`` under Dagster Pipes, wherever this launcher runs things (``env`` on top)."""
        raise NotImplementedError

    def progress_bar(self) -> bool:
        """Whether the training child draws its progress bar (where someone watches a terminal)."""
        return False

    def pool(self) -> str:
        """The Dagster concurrency pool of this launcher's accelerator, e.g. ``accelerator/cpu`` or
        ``accelerator/tpu-v5-lite-podslice-2x4``: runs that train or evaluate on it take a slot."""
        return f"{POOL_PREFIX}cpu"

    def train(self, context: AssetExecutionContext, launch: TrainingLaunch) -> list[Any]:
        """A training or fine-tuning run (``TrainLaunch``, ``SFTLaunch``), drawing its progress bar where
        this launcher's runs are watched; the steps it reported."""
        launch = launch.model_copy(update={"progress_bar": self.progress_bar()})
        return self.launch_training(context, launch.write())

    def launch_training(self, context: AssetExecutionContext, args: list[str]) -> list[Any]:
        """A training process: here one, like any launch."""
        return self.launch(context, args)

    def evaluate(self, context: AssetExecutionContext, launch: EvalLaunch) -> list[Any]:
        """An evaluation, which writes its results file; its progress lines and summary message."""
        return self.launch(context, launch.write(), QUIET_EVAL_ENV)

    def sweep(self, context: AssetExecutionContext, launch: SweepLaunch) -> list[Any]:
        """A sweep, its trials trained one after another in the launched process (one pod, however many
        hosts a training run of this launcher spans), which writes its outcome into its folder; or, with the
        launch's ``trial``, that one trial finished."""
        return self.launch(context, launch.write(), launch.env())


class LocalLauncher(LauncherResource):
    """A subprocess on this machine (CPU JAX unless the machine has an accelerator): the default."""

    python: str = Field(default=sys.executable, description="interpreter that has marin_pipelines installed")
    compilation_cache: str | None = default_compilation_cache()  # the user's: shared by clones and tests

    def progress_bar(self) -> bool:
        return sys.stderr.isatty()  # `make demo` in a terminal: the bar; tests and logs: none

    def launch(
        self, context: AssetExecutionContext, args: list[str], env: dict[str, str] | None = None
    ) -> list[Any]:
        # the child dies with this process (orphans.py): a killed run leaves no child training on
        client = PipesSubprocessClient(env={**(env or {}), **self.child_env(), **launched_env()})
        invocation = client.run(context=context, command=[self.python, *args])
        return invocation.get_custom_messages()


class K8sLauncher(LauncherResource):
    """Pods on Kubernetes (GKE): TPU slices, NVIDIA GPUs or CPU, through ``PipesK8sClient``.

    A run with ``hosts`` > 1 trains on one pod per host (see ``multi_host``); evaluation is one pod.
    ``launcher_env.launcher_from_env`` builds one from ``MARIN_K8S_*`` variables."""

    image: str = Field(description="container image with marin_pipelines installed")
    namespace: str = "default"
    service_account: str | None = Field(None, description="Kubernetes service account (Workload Identity)")
    accelerator: Literal["cpu", "tpu", "gpu"] = "cpu"
    tpu_type: str | None = Field(None, description="GKE TPU accelerator, e.g. tpu-v5-lite-podslice")
    tpu_topology: str | None = Field(None, description="TPU slice topology, e.g. 2x4")
    gpu_type: str | None = Field(None, description="GKE GPU accelerator label, e.g. nvidia-h100-80gb")
    chips: int = Field(1, gt=0, description="TPU chips or GPUs requested by each pod (each host)")
    hosts: int = Field(1, gt=0, description="pods (hosts) a training run spans; a TPU slice's hosts")
    cpu: str = "4"
    memory: str = "16Gi"
    secret_env: dict[str, str] = Field(
        default_factory=dict, description="env var -> 'secret-name/key', e.g. WANDB_API_KEY: wandb/api-key"
    )
    volume_claim: str | None = Field(None, description="PersistentVolumeClaim holding the store")
    store_mount: str | None = Field(None, description="where the claim is mounted: the store root's path")
    store_root: str | None = Field(
        default_factory=lambda: os.environ.get(STORE_ROOT),
        description="the store root the pods are given as MARIN_STORE_ROOT (default: this process's); "
        "gs://bucket/prefix needs no volume, only the service account's access to the bucket",
    )
    run_hours: float = Field(
        7 * 24.0,
        gt=0,
        description="the longest a launched pod may run: PipesK8sClient's pod_wait_timeout (24 h by "
        "default, too short for a long training run) and the worker Job's deadline",
    )

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str, info: ValidationInfo) -> str:
        if not QUANTITY.fullmatch(value):
            raise ValueError(
                f"{info.field_name} must be a Kubernetes quantity (4, 500m, 16Gi), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> K8sLauncher:
        if self.accelerator == "tpu":
            if not (self.tpu_type and self.tpu_topology):
                raise ValueError("accelerator 'tpu' needs tpu_type and tpu_topology")
            slice_chips = topology_chips(self.tpu_topology)
            if self.chips * self.hosts != slice_chips:
                raise ValueError(
                    f"tpu_topology {self.tpu_topology} has {slice_chips} chips, but chips x hosts is "
                    f"{self.chips} x {self.hosts}: chips counts one host's chips (4 on a multi-host slice)"
                )
        if bool(self.volume_claim) != bool(self.store_mount):
            raise ValueError("volume_claim and store_mount go together")
        for name, ref in self.secret_env.items():
            if ref.count("/") != 1:
                raise ValueError(f"secret_env[{name!r}] must be 'secret-name/key', got {ref!r}")
        if self.store_root and "://" not in self.store_root:
            mount = self.store_mount
            if not (mount and Path(self.store_root).is_relative_to(mount)):
                raise ValueError(
                    f"store_root {self.store_root} is a local folder the pods cannot see: use a "
                    "gs://bucket/prefix store, or mount the folder (volume_claim, store_mount)"
                )
        return self

    @property
    def run_seconds(self) -> int:
        return round(self.run_hours * 3600)

    def pool(self) -> str:
        if self.accelerator == "tpu":
            return f"{POOL_PREFIX}{self.tpu_type}-{self.tpu_topology}"
        if self.accelerator == "gpu":
            return f"{POOL_PREFIX}{self.gpu_type or 'gpu'}"
        return super().pool()

    def child_env(self) -> dict[str, str]:
        """``env`` and the compilation cache's settings, on top of the store root (a pod inherits nothing)."""
        store = {STORE_ROOT: self.store_root} if self.store_root else {}
        return {**store, **super().child_env()}

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
        env = env_list(self.child_env())
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
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": self.run_seconds,  # an orphaned pod (its run worker gone) ends too
            "containers": [container],
        }
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
        return self._run_pod(context, args, env or {}, self.pod_spec(), {})

    def launch_training(self, context: AssetExecutionContext, args: list[str]) -> list[Any]:
        """One pod, or one pod per host of the slice or node group."""
        if self.hosts == 1:
            return self.launch(context, args)
        return self._train_on_hosts(context, args)

    def _train_on_hosts(self, context: AssetExecutionContext, args: list[str]) -> list[Any]:
        """Process 0 as the Pipes pod, the other hosts as an Indexed Job, under a headless Service.

        The Job and the Service exist before process 0 starts, and are deleted once it has ended,
        whatever happened (the Job with its pods)."""
        group = HostGroup.new(self.namespace, self.hosts, tpu=self.accelerator == "tpu")
        core, batch = self.kubernetes_apis()
        base = self.pod_spec()
        with ExitStack() as cleanup:
            workers = group.worker_job(base, ["python", *args], self.run_seconds, self.run_pod_owner())
            created = batch.create_namespaced_job(self.namespace, workers)
            cleanup.callback(
                batch.delete_namespaced_job, group.workers, self.namespace, propagation_policy="Background"
            )
            core.create_namespaced_service(self.namespace, group.service(created.metadata.uid))
            cleanup.callback(core.delete_namespaced_service, group.name, self.namespace)
            leader_spec = group.leader_pod_spec(base)
            return self._run_pod(context, args, group.leader_env(), leader_spec, {"labels": group.labels})

    def _run_pod(
        self,
        context: AssetExecutionContext,
        args: list[str],
        env: dict[str, str],
        pod_spec: dict[str, Any],
        pod_meta: dict[str, Any],
    ) -> list[Any]:
        """``python *args`` in one pod under Dagster Pipes, owned by the run's pod; its custom messages."""
        from dagster_k8s import PipesK8sClient

        invocation = PipesK8sClient().run(
            context=context,
            image=self.image,
            command=["python", *args],
            namespace=self.namespace,
            base_pod_meta={**pod_meta, "ownerReferences": self.run_pod_owner()},
            base_pod_spec=pod_spec,
            env=env,
            pod_wait_timeout=self.run_seconds,
        )
        return invocation.get_custom_messages()

    def run_pod_owner(self) -> list[dict[str, str]]:
        """The run worker's pod as the owner of what is launched, when this runs in such a pod in the
        launcher's namespace (the Helm values give it ``MARIN_RUN_POD_*``): then a pod or Job whose run
        is terminated, or whose run pod went down with its node, is deleted with it instead of training on,
        unseen, beside the retried run. An owner in another namespace would have it deleted at once."""
        name, uid, namespace = (os.environ.get(variable) for variable in RUN_POD)
        if not (name and uid) or namespace != self.namespace:
            return []
        return [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]

    def kubernetes_apis(self) -> tuple[Any, Any]:
        """The core and batch API clients for the worker Job and Service, configured the way
        PipesK8sClient configures its own: in-cluster inside a pod, else the local kubeconfig."""
        import kubernetes

        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config()
        else:
            kubernetes.config.load_kube_config()
        return kubernetes.client.CoreV1Api(), kubernetes.client.BatchV1Api()

    def multislice_jobset(self, name: str, args: list[str], slices: int) -> dict[str, Any]:
        """A JobSet manifest running ``python *args`` on ``slices`` TPU slices of this launcher's shape
        (``kubectl apply`` it; ``deploy/jobset.py`` prints one)."""
        if self.accelerator != "tpu":
            raise ValueError(f"a multislice JobSet needs accelerator 'tpu', not {self.accelerator!r}")
        if slices < 1:
            raise ValueError(f"slices must be at least 1, got {slices}")
        return jobset(name, self.pod_spec(), ["python", *args], slices, self.hosts, self.run_seconds)


def topology_chips(topology: str) -> int:
    """Chips in a TPU slice of ``topology`` (2x4 -> 8, 2x2x4 -> 16)."""
    if not TOPOLOGY.fullmatch(topology):
        raise ValueError(f"tpu_topology must be dimensions like 2x4 or 2x2x4, got {topology!r}")
    return math.prod(int(side) for side in topology.split("x"))
