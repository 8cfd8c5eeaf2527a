"""The Kubernetes launcher's pod spec, validated by the kubernetes client models.

The local launcher's run through Dagster Pipes is tested beside the train command (tests/train)."""

import pytest
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from kubernetes.client import V1PodSpec
from pydantic import ValidationError

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
