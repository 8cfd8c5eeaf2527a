"""The multislice JobSet (deploy/jobset.py): its own fields checked against JobSet's API, its Jobs and pods
against the kubernetes client models, and the environment that joins the slices."""

import importlib.util
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from kubernetes.client import V1JobTemplateSpec, V1ObjectMeta
from pydantic import BaseModel, ConfigDict

from marin_pipelines.resources.launcher_env import launcher_from_env
from marin_pipelines.resources.multi_host import NODE_POOL, k8s_model

DEPLOY = Path(__file__).parents[3] / "deploy"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# JobSet's v1alpha2 API (jobset.x-k8s.io), the fields of its spec; the child Jobs are plain Jobs
class ReplicatedJob(Strict):
    name: str
    replicas: int = 1
    dependsOn: list[dict[str, str]] | None = None
    template: dict[str, Any]


class Network(Strict):
    enableDNSHostnames: bool | None = None
    subdomain: str | None = None
    publishNotReadyAddresses: bool | None = None


class FailurePolicy(Strict):
    maxRestarts: int
    restartStrategy: Literal["Recreate", "BlockingRecreate"] | None = None
    rules: list[dict[str, Any]] | None = None


class SuccessPolicy(Strict):
    operator: Literal["All", "Any"]
    targetReplicatedJobs: list[str] | None = None


class JobSetSpec(Strict):
    replicatedJobs: list[ReplicatedJob]
    network: Network | None = None
    failurePolicy: FailurePolicy | None = None
    successPolicy: SuccessPolicy | None = None
    startupPolicy: dict[str, Any] | None = None
    suspend: bool | None = None
    managedBy: str | None = None
    ttlSecondsAfterFinished: int | None = None


class JobSet(Strict):
    apiVersion: Literal["jobset.x-k8s.io/v1alpha2"]
    kind: Literal["JobSet"]
    metadata: dict[str, Any]
    spec: JobSetSpec


def checked(manifest: dict[str, Any]) -> tuple[JobSet, list[V1JobTemplateSpec]]:
    """The JobSet as its API reads it, and each replicated Job as Kubernetes reads it."""
    jobset = JobSet.model_validate(manifest)
    k8s_model(V1ObjectMeta, jobset.metadata)
    return jobset, [k8s_model(V1JobTemplateSpec, job.template) for job in jobset.spec.replicatedJobs]


SLICES = {"MARIN_K8S_TPU_TOPOLOGY": "4x4", "MARIN_K8S_CHIPS": "4", "MARIN_K8S_HOSTS": "4"}
ARGS = [
    "--name",
    "big-run",
    "--slices",
    "2",
    "--config",
    "gs://b/big.yaml",
    "--data",
    "gs://b/c",
    "--out",
    "gs://b/o",
]


@pytest.fixture
def manifest(marin_env, monkeypatch, capsys) -> dict[str, Any]:
    """What deploy/jobset.py prints for two v5e slices of 4 hosts, with the cluster's environment."""
    for name, value in {**marin_env, **SLICES}.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("jobset_script", DEPLOY / "jobset.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(ARGS) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_two_slices_of_the_launchers_pods_joined_by_megascale(manifest, marin_env):
    jobset, (slice_job,) = checked(manifest)
    launcher = launcher_from_env({**marin_env, **SLICES})
    command = ["-m", "marin_pipelines.cli", "train", "--config", "gs://b/big.yaml", "--data", "gs://b/c"]
    assert manifest == launcher.multislice_jobset("big-run", [*command, "--out", "gs://b/o", "--quiet"], 2)
    assert jobset.metadata["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": NODE_POOL}
    assert jobset.spec.replicatedJobs[0].replicas == 2 and jobset.spec.network.enableDNSHostnames
    assert (slice_job.spec.completion_mode, slice_job.spec.completions, slice_job.spec.parallelism) == (
        "Indexed",
        4,
        4,
    )
    pod = slice_job.spec.template.spec
    base = launcher.pod_spec()
    assert pod.node_selector == base["nodeSelector"] and pod.service_account_name == "marin-train"
    (container,) = pod.containers
    assert container.resources.limits["google.com/tpu"] == "4"
    assert container.command[:4] == ["python", "-m", "marin_pipelines.cli", "train"]
    env = {e.name: e for e in container.env}
    assert (
        env["MARIN_DISTRIBUTED"].value == "auto" and "MARIN_NUM_PROCESSES" not in env
    )  # JAX finds the slices
    assert env["MARIN_STORE_ROOT"].value == marin_env["MARIN_STORE_ROOT"]
    assert env["MEGASCALE_NUM_SLICES"].value == "2"
    assert env["MEGASCALE_COORDINATOR_ADDRESS"].value == "big-run-slice-0-0.big-run"
    slice_id = env["MEGASCALE_SLICE_ID"].value_from.field_ref.field_path
    assert slice_id == "metadata.annotations['jobset.sigs.k8s.io/job-index']"
    assert env["WANDB_API_KEY"].value_from.secret_key_ref.name == "wandb"  # a reference, never a value


@pytest.mark.parametrize(
    "path",
    [
        ("spec", "replicatedJobs"),
        ("spec", "failurePolicy", "maxRestarts"),
        ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "nodeSelector"),
    ],
)
def test_a_misspelt_key_is_refused(manifest, misspelt, path):
    with pytest.raises(Exception, match=str(path[-1])):
        checked(misspelt(manifest, *path))


def test_a_jobset_needs_tpu_slices(marin_env):
    gpus = launcher_from_env(
        {**marin_env, "MARIN_K8S_ACCELERATOR": "gpu", "MARIN_K8S_GPU_TYPE": "nvidia-h100-80gb"}
    )
    with pytest.raises(ValueError, match="needs accelerator 'tpu', not 'gpu'"):
        gpus.multislice_jobset("big-run", ["-m", "marin_pipelines.cli", "train"], 2)
