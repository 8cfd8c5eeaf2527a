"""deploy/kuberay/raycluster.yaml: a Ray cluster of the project's own image that the run pods can join,
and the environment switch that sends the document stages there."""

import re
from pathlib import Path

import pytest
import yaml
from kubernetes.client import V1PodTemplateSpec

from marin_pipelines.engine import LocalEngine
from marin_pipelines.resources.engine import LocalEngineResource, RayCluster, engine_from_env, engine_of
from marin_pipelines.resources.multi_host import k8s_model

ROOT = Path(__file__).parents[3]
DEPLOY = ROOT / "deploy"


@pytest.fixture
def ray_cluster() -> dict:
    return yaml.safe_load((DEPLOY / "kuberay" / "raycluster.yaml").read_text())


def templates(cluster: dict) -> list[dict]:
    return [cluster["spec"]["headGroupSpec"]["template"]] + [
        group["template"] for group in cluster["spec"]["workerGroupSpecs"]
    ]


def test_the_ray_nodes_run_the_project_image_its_ray_and_its_service_account(ray_cluster, marin_env):
    locked = re.search(r"^ray==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M).group(1)
    assert ray_cluster["spec"]["rayVersion"] == locked
    for template in templates(ray_cluster):
        pod = k8s_model(V1PodTemplateSpec, template).spec  # a valid pod spec, every key known
        assert pod.service_account_name == marin_env["MARIN_K8S_SERVICE_ACCOUNT"]
        (container,) = pod.containers
        assert container.image == marin_env["MARIN_K8S_IMAGE"]
        assert [source.config_map_ref.name for source in container.env_from] == ["marin-env"]
        assert {e.name: e.value for e in container.env}["RAY_AUTH_MODE"] == "disabled"


def test_the_run_pods_join_the_head_service_that_kuberay_makes(ray_cluster):
    text = (DEPLOY / "k8s" / "marin-env.yaml").read_text()
    address = re.search(r"RAY_ADDRESS: (\S+)", text).group(1)
    assert address == f"{ray_cluster['metadata']['name']}-head-svc.marin.svc:6379"


def test_marin_engine_picks_the_resource(marin_env):
    assert marin_env["MARIN_ENGINE"] == "local"
    local = engine_from_env(marin_env)
    assert isinstance(local, LocalEngineResource) and isinstance(engine_of(local), LocalEngine)
    assert isinstance(engine_from_env({**marin_env, "MARIN_ENGINE": "ray"}), RayCluster)
    with pytest.raises(ValueError, match="MARIN_ENGINE='spark': choose one of local, ray"):
        engine_from_env({"MARIN_ENGINE": "spark"})
