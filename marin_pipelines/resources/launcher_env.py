"""The launcher chosen by environment variables, so that a deployment needs no code edit.

``MARIN_LAUNCHER`` is ``local`` (the default: ``LocalLauncher``, a subprocess here) or ``k8s``
(``K8sLauncher``, configured by the ``MARIN_K8S_*`` variables below). ``MARIN_STORE_ROOT``, when set, is
passed on to every pod. A wrong value, a misspelt ``MARIN_K8S_*`` name or a missing image is an error
that names the variable, before any run starts.

The ``MARIN_K8S_DATA_*`` variables size the run pods of the jobs that process documents (a snapshot, an
experiment's pipeline): ``data_run_tags`` turns them into the ``dagster-k8s/config`` tag that Dagster's
``K8sRunLauncher`` reads. Their stages start one worker per CPU of the pod's limit (``cpu_limit``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from pydantic import ValidationError

from marin_pipelines.resources.launcher import QUANTITY, K8sLauncher, LauncherResource, LocalLauncher
from marin_pipelines.store import STORE_ROOT

LAUNCHER = "MARIN_LAUNCHER"
LAUNCHERS = ("local", "k8s")
PREFIX = "MARIN_K8S_"
# variable -> (K8sLauncher field, what it holds)
K8S_VARIABLES: dict[str, tuple[str, str]] = {
    "MARIN_K8S_IMAGE": ("image", "container image with marin_pipelines installed (required)"),
    "MARIN_K8S_NAMESPACE": ("namespace", "namespace of the launched pods (default: default)"),
    "MARIN_K8S_ACCELERATOR": ("accelerator", "cpu, tpu or gpu (default: cpu)"),
    "MARIN_K8S_TPU_TYPE": ("tpu_type", "GKE TPU accelerator, e.g. tpu-v5-lite-podslice"),
    "MARIN_K8S_TPU_TOPOLOGY": ("tpu_topology", "TPU slice topology, e.g. 2x4"),
    "MARIN_K8S_GPU_TYPE": ("gpu_type", "GKE GPU accelerator, e.g. nvidia-h100-80gb"),
    "MARIN_K8S_CHIPS": ("chips", "TPU chips or GPUs per pod (per host)"),
    "MARIN_K8S_HOSTS": ("hosts", "hosts (pods) a training run spans (default: 1)"),
    "MARIN_K8S_CPU": ("cpu", "CPU request and limit of each pod (default: 4)"),
    "MARIN_K8S_MEMORY": ("memory", "memory request and limit of each pod (default: 16Gi)"),
    "MARIN_K8S_SERVICE_ACCOUNT": ("service_account", "the pods' service account (Workload Identity)"),
    "MARIN_K8S_SECRETS": ("secret_env", "ENV=secret/key,... : env vars read from Kubernetes secrets"),
    "MARIN_K8S_ENV": ("env", "ENV=value,... : more environment for the pods"),
    "MARIN_K8S_VOLUME_CLAIM": ("volume_claim", "PersistentVolumeClaim holding a folder store"),
    "MARIN_K8S_STORE_MOUNT": ("store_mount", "where that claim is mounted in the pods"),
    "MARIN_K8S_COMPILATION_CACHE": ("compilation_cache", "folder for JAX's compilation cache, shared"),
    "MARIN_K8S_RUN_HOURS": ("run_hours", "the longest a pod may run, in hours (default: 168)"),
}
# variable -> (Kubernetes resource of a data job's run pod, what it holds); requests equal limits
RUN_POD_VARIABLES: dict[str, tuple[str, str]] = {
    "MARIN_K8S_DATA_CPU": ("cpu", "CPUs of a document-processing run pod: its stages' workers (e.g. 16)"),
    "MARIN_K8S_DATA_MEMORY": ("memory", "memory of a document-processing run pod (e.g. 64Gi)"),
    "MARIN_K8S_DATA_DISK": ("ephemeral-storage", "local disk of that pod: bucket writes are staged on it"),
}
K8S_CONFIG_TAG = "dagster-k8s/config"
IMAGE = "MARIN_K8S_IMAGE"
FIELD_VARIABLES = {field: variable for variable, (field, _) in K8S_VARIABLES.items()}
FIELD_VARIABLES["store_root"] = STORE_ROOT
PAIRS = {"MARIN_K8S_SECRETS", "MARIN_K8S_ENV"}


def launcher_from_env(environ: Mapping[str, str] = os.environ) -> LauncherResource:
    """``LocalLauncher`` unless ``MARIN_LAUNCHER=k8s``; then a ``K8sLauncher`` from ``MARIN_K8S_*``."""
    kind = environ.get(LAUNCHER, "local")
    if kind not in LAUNCHERS:
        raise ValueError(f"{LAUNCHER} must be one of {', '.join(LAUNCHERS)}, got {kind!r}")
    given = sorted(name for name in environ if name.startswith(PREFIX))
    if kind == "local":
        if given:
            raise ValueError(
                f"{', '.join(given)} set, but {LAUNCHER} is not k8s: set {LAUNCHER}=k8s or unset them"
            )
        return LocalLauncher()
    unknown = [name for name in given if name not in K8S_VARIABLES | RUN_POD_VARIABLES]
    if unknown:
        known = "\n".join(
            f"  {name}: {what}" for name, (_, what) in (K8S_VARIABLES | RUN_POD_VARIABLES).items()
        )
        raise ValueError(f"unknown variable {', '.join(unknown)}; the launcher reads:\n{known}")
    if IMAGE not in environ:
        raise ValueError(f"{LAUNCHER}=k8s needs {IMAGE}: {K8S_VARIABLES[IMAGE][1]}")
    fields: dict[str, object] = {"store_root": environ.get(STORE_ROOT)}
    for name in (name for name in given if name in K8S_VARIABLES):
        value = environ[name]
        fields[K8S_VARIABLES[name][0]] = pairs(name, value) if name in PAIRS else value
    try:
        return K8sLauncher(**fields)
    except ValidationError as error:
        problems = "\n".join(f"  {describe(e)}" for e in error.errors())
        raise ValueError(f"{LAUNCHER}=k8s, but the launcher's variables are wrong:\n{problems}") from None


def data_run_tags(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The run tags that size a document-processing job's run pod from ``MARIN_K8S_DATA_*`` (none set, or
    no Kubernetes: no tags, and the run launcher's default size in deploy/helm/values.yaml applies)."""
    if environ.get(LAUNCHER) != "k8s":
        return {}
    resources = {}
    for name, (resource, _) in RUN_POD_VARIABLES.items():
        value = environ.get(name)
        if value is None:
            continue
        if not QUANTITY.fullmatch(value):
            raise ValueError(f"{name}={value!r} must be a Kubernetes quantity (16, 500m, 64Gi)")
        resources[resource] = value
    if not resources:
        return {}
    config = {"container_config": {"resources": {"requests": resources, "limits": resources}}}
    return {K8S_CONFIG_TAG: json.dumps(config)}


def pairs(variable: str, value: str) -> dict[str, str]:
    """``A=x,B=y`` as a dict; an entry without ``=`` is an error naming ``variable``."""
    out = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, sep, item = entry.partition("=")
        if not (sep and name and item):
            raise ValueError(f"{variable}: entry {entry!r} must be NAME=VALUE (comma-separated)")
        out[name] = item
    return out


def describe(error: Mapping) -> str:
    """One pydantic error in terms of the variables: the one that set the field, or those the
    message names (a check across fields)."""
    message = error["msg"].removeprefix("Value error, ")
    location = error["loc"]
    if location and location[0] in FIELD_VARIABLES:
        return f"{FIELD_VARIABLES[str(location[0])]}={error['input']!r}: {message}"
    named = [
        f"{field} is {var}" for field, var in FIELD_VARIABLES.items() if re.search(rf"\b{field}\b", message)
    ]
    return message + (f" ({', '.join(named)})" if named else "")
