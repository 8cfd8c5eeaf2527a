"""deploy/k8s/: the pipeline's environment (a ConfigMap the launcher is built from) and the accounts and
permissions of the launched pods, as the kubernetes client models read them and as the launcher needs them."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import V1ConfigMap, V1Role, V1RoleBinding, V1ServiceAccount

from marin_pipelines.resources.launcher import K8sLauncher
from marin_pipelines.resources.launcher_env import launcher_from_env
from marin_pipelines.resources.multi_host import k8s_model

K8S = Path(__file__).parents[3] / "deploy" / "k8s"
VALUES = Path(__file__).parents[3] / "deploy" / "helm" / "values.yaml"
MODELS = {
    "ConfigMap": V1ConfigMap,
    "ServiceAccount": V1ServiceAccount,
    "Role": V1Role,
    "RoleBinding": V1RoleBinding,
}


def documents(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((K8S / name).read_text()))


def checked(document: dict[str, Any]) -> Any:
    """The object as the kubernetes client reads it; for the pipeline's environment, the launcher too."""
    model = k8s_model(MODELS[document["kind"]], document)
    if document["kind"] == "ConfigMap":
        launcher_from_env(model.data)
    return model


def test_the_environment_builds_the_launcher_of_the_cluster():
    (config_map,) = documents("marin-env.yaml")
    env = checked(config_map).data
    launcher = launcher_from_env(env)
    assert isinstance(launcher, K8sLauncher) and launcher.store_root.startswith("gs://")
    assert launcher.volume_claim is None  # a bucket store: no volume
    # values only: every secret is a reference the pods resolve (MARIN_K8S_SECRETS), never a value
    secret_like = [
        k for k in env if any(w in k for w in ("KEY", "TOKEN", "PASSWORD")) and k != "MARIN_K8S_SECRETS"
    ]
    assert not secret_like
    assert all(ref.count("/") == 1 for ref in launcher.secret_env.values())


def test_the_launcher_may_do_what_a_multi_host_run_does(marin_env):
    account, role, binding = (checked(d) for d in documents("rbac.yaml"))
    launcher = launcher_from_env(marin_env)
    values = yaml.safe_load(VALUES.read_text())
    assert account.metadata.name == launcher.service_account
    assert "iam.gke.io/gcp-service-account" in account.metadata.annotations  # Workload Identity to the bucket
    granted = {
        (group, resource, verb)
        for rule in role.rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    # the worker Job and the headless Service of a multi-host run, and the Pipes pod and its log
    needed = {("batch", "jobs", "create"), ("batch", "jobs", "delete"), ("", "services", "create")}
    needed |= {("", "services", "delete"), ("", "pods", "create"), ("", "pods/log", "get")}
    assert needed <= granted
    assert binding.role_ref.name == role.metadata.name
    (subject,) = binding.subjects
    assert subject.name == values["global"]["serviceAccountName"]  # the run pods' account
    job_namespace = values["runLauncher"]["config"]["k8sRunLauncher"]["jobNamespace"]
    assert subject.namespace == launcher.namespace == job_namespace


@pytest.mark.parametrize(
    ("name", "index", "path"),
    [
        ("marin-env.yaml", 0, ("metadata",)),
        ("marin-env.yaml", 0, ("data", "MARIN_K8S_TPU_TOPOLOGY")),
        ("rbac.yaml", 0, ("metadata", "annotations")),
        ("rbac.yaml", 1, ("rules", 0, "apiGroups")),
        ("rbac.yaml", 2, ("roleRef", "apiGroup")),
    ],
)
def test_a_misspelt_key_is_refused(misspelt, name, index, path):
    document = documents(name)[index]
    checked(document)
    with pytest.raises(Exception, match=str(path[-1])):
        checked(misspelt(document, *path))
