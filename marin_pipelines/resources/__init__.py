"""Dagster resources: the artifact store, the Datashop annotator, the training launcher and the engine of
the document stages."""

import os
from typing import Any

from marin_pipelines.store import STORE_ROOT


def default_resources(store_root: str | None = None) -> dict[str, Any]:
    """The store (at ``store_root``, else ``MARIN_STORE_ROOT`` or ``.marin/store``) and the launcher the
    environment chooses (``MARIN_LAUNCHER``: a subprocess here unless ``k8s``), which hands its pods
    the same store root; the document stages' engine (``MARIN_ENGINE``: processes here unless ``ray``)."""
    # imported here, not with the package: the launchers and engines bring the Kubernetes and Ray clients,
    # which a module of this package that needs none of them (the store) should not cost
    from marin_pipelines.resources.annotator import AnnotatorResource
    from marin_pipelines.resources.engine import engine_from_env
    from marin_pipelines.resources.launcher_env import launcher_from_env
    from marin_pipelines.resources.store import ArtifactIOManager, ArtifactStoreResource

    store = ArtifactStoreResource(root=store_root) if store_root else ArtifactStoreResource()
    environ = {**os.environ, STORE_ROOT: store_root} if store_root else os.environ
    return {
        "store": store,
        "io_manager": ArtifactIOManager(store=store),
        "annotator": AnnotatorResource(store=store),
        "launcher": launcher_from_env(environ),
        "engine": engine_from_env(environ),
    }
