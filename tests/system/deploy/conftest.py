"""What the deploy tests share: the files under deploy/, read strictly, and a way to misspell one key."""

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import V1ConfigMap

from marin_pipelines.resources.multi_host import k8s_model

ROOT = Path(__file__).parents[3]
DEPLOY = ROOT / "deploy"


def misspell(document: Any, *path: str | int) -> Any:
    """A copy of ``document`` with the key at ``path`` misspelt (its last letter doubled)."""
    out = copy.deepcopy(document)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    parent[f"{key}{key[-1]}"] = parent.pop(key)
    return out


@pytest.fixture
def misspelt() -> Callable[..., Any]:
    return misspell


@pytest.fixture
def marin_env() -> dict[str, str]:
    """The pipeline's environment on the cluster: deploy/k8s/marin-env.yaml's data, a valid ConfigMap."""
    config_map = yaml.safe_load((DEPLOY / "k8s" / "marin-env.yaml").read_text())
    return k8s_model(V1ConfigMap, config_map).data
