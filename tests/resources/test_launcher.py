"""The Kubernetes launcher's pod spec, validated by the kubernetes client models, and the commands it runs.

The local launcher's runs through Dagster Pipes are tested beside the train command (tests/train) and the
eval assets (tests/evals)."""

import argparse
from pathlib import Path

import pytest
from dagster_k8s import PipesK8sClient
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from dagster_k8s.pipes import build_pod_body
from kubernetes.client import V1PodSpec
from pydantic import ValidationError

from marin_pipelines.cli import eval as eval_cli
from marin_pipelines.evals.checkpoint_eval import EvalConfig
from marin_pipelines.resources.launcher import K8sLauncher


def validated(spec: dict) -> V1PodSpec:
    """The spec as the kubernetes client reads it: strict about every key's name and type."""
    return k8s_model_from_dict(V1PodSpec, k8s_snake_case_dict(V1PodSpec, spec))


TPU = dict(
    image="us-docker.pkg.dev/lab/marin:1",
    accelerator="tpu",
    tpu_type="tpu-v5-lite-podslice",
    tpu_topology="2x4",
    chips=8,
    service_account="marin-train",
    env={"WANDB_MODE": "online"},
    secret_env={"WANDB_API_KEY": "wandb/api-key"},
    volume_claim="marin-store",
    store_mount="/store",
)


def test_tpu_pod_spec_is_a_valid_kubernetes_pod_spec():
    spec = validated(K8sLauncher(**TPU).pod_spec())
    assert spec.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    (container,) = spec.containers
    assert container.resources.limits["google.com/tpu"] == "8" and container.image == TPU["image"]
    assert spec.service_account_name == "marin-train" and spec.restart_policy == "Never"
    secret = next(e for e in container.env if e.name == "WANDB_API_KEY").value_from.secret_key_ref
    assert (secret.name, secret.key) == ("wandb", "api-key")
    assert container.volume_mounts[0].mount_path == "/store"
    assert spec.volumes[0].persistent_volume_claim.claim_name == "marin-store"


def test_gpu_pod_spec_requests_nvidia_gpus():
    launcher = K8sLauncher(image="marin:1", accelerator="gpu", gpu_type="nvidia-h100-80gb", chips=1)
    spec = validated(launcher.pod_spec())
    assert spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert spec.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert "google.com/tpu" not in spec.containers[0].resources.limits


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"tpu_topology": None}, "needs tpu_type and tpu_topology"),
        ({"secret_env": {"KEY": "no-slash"}}, "secret-name/key"),
        ({"store_mount": None}, "volume_claim and store_mount go together"),
    ],
)
def test_bad_k8s_launcher_config_is_refused(update, message):
    with pytest.raises(ValidationError, match=message):
        K8sLauncher(**{**TPU, **update})


def test_a_misspelt_field_would_be_caught():
    with pytest.raises(Exception, match="nodeSelektor"):
        validated({**K8sLauncher(**TPU).pod_spec(), "nodeSelektor": {}})


class Launched(Exception):
    """Raised by the stand-in for the cluster once the pod it was asked to start has been recorded."""


@pytest.fixture
def launched(monkeypatch) -> list:
    """The pods the launcher asks PipesK8sClient to run, built as dagster-k8s builds them."""
    pods = []

    def run(self, *, context, image, command, namespace, base_pod_spec, env=None):
        pods.append(build_pod_body("pod", image, command, env or {}, None, base_pod_spec))
        raise Launched

    monkeypatch.setattr(PipesK8sClient, "run", run)
    return pods


def test_k8s_evaluate_runs_the_eval_entry_point_on_the_training_pod_spec(launched):
    launcher = K8sLauncher(**TPU, compilation_cache="/store/jax_cache")
    config = EvalConfig(
        tasks=["marin_python_mc", "marin_python_qa"],
        heldout={"paloma": ["gs://lab/paloma/c4.jsonl", "gs://lab/paloma/wiki.jsonl"]},
        include_paths=["/store/tasks"],
        limit=50,
    )
    with pytest.raises(Launched):
        launcher.evaluate(
            None,
            Path("/store/demo/checkpoint/_/v1"),
            Path("/store/demo/tokenizer/_/v2/tokenizer.json"),
            {"web": ["/store/demo/tokenized_cache/_/v3"]},
            config,
            32,
            Path("/store/demo/eval_results/_/.v4.tmp/results.json"),
        )
    with pytest.raises(Launched):
        launcher.train(None, Path("/store/run.yaml"), Path("/store/cache"), Path("/store/out"))
    evaluate, train = launched
    assert (
        evaluate.spec.node_selector
        == train.spec.node_selector
        == validated(launcher.pod_spec()).node_selector
    )
    container = evaluate.spec.containers[0]
    assert container.resources.limits["google.com/tpu"] == "8"
    assert {e.name: e.value for e in container.env}["JAX_COMPILATION_CACHE_DIR"] == "/store/jax_cache"
    assert train.spec.containers[0].command[:3] == ["python", "-m", "marin_pipelines.train"]
    assert "--quiet" in train.spec.containers[0].command  # a pod's log is no terminal: no progress bar
    assert {e.name: e.value for e in container.env}["TQDM_DISABLE"] == "1"
    command = evaluate.spec.containers[0].command
    assert command[:3] == ["python", "-m", "marin_pipelines.evals"]

    parser = argparse.ArgumentParser()  # what the entry point in the pod reads from that command
    eval_cli.register(parser.add_subparsers())
    args = parser.parse_args(["eval", *command[3:]])
    assert args.bpb == [("web", ["/store/demo/tokenized_cache/_/v3"]), ("paloma", config.heldout["paloma"])]
    assert args.tasks == config.tasks and args.limit == 50 and args.batch_size == 32
    assert args.include_path == [Path("/store/tasks")]
    assert args.checkpoint == Path("/store/demo/checkpoint/_/v1")
    assert args.tokenizer == Path("/store/demo/tokenizer/_/v2/tokenizer.json")
    assert args.out == Path("/store/demo/eval_results/_/.v4.tmp/results.json")


def test_a_heldout_set_named_like_a_mixture_source_is_refused_before_launching(launched):
    config = EvalConfig(heldout={"web": ["gs://lab/web.jsonl"]})
    with pytest.raises(ValueError, match="clash"):
        K8sLauncher(**TPU).evaluate(
            None, Path("/c"), Path("/t.json"), {"web": ["/cache"]}, config, 8, Path("/r.json")
        )
    assert not launched
