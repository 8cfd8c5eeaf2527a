"""Dagster resources: the artifact store, the Datashop annotator and the training launcher."""

from typing import Any

from marin_pipelines.resources.annotator import AnnotatorResource
from marin_pipelines.resources.launcher import LocalLauncher
from marin_pipelines.resources.store import ArtifactIOManager, ArtifactStoreResource


def default_resources(store_root: str | None = None) -> dict[str, Any]:
    store = ArtifactStoreResource(root=store_root) if store_root else ArtifactStoreResource()
    return {
        "store": store,
        "io_manager": ArtifactIOManager(store=store),
        "annotator": AnnotatorResource(store=store),
        "launcher": LocalLauncher(),
    }
