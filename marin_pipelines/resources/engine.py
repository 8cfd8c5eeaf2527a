"""Where the document stages run their shards, as a Dagster resource: the local process pool (the
default), or a Ray cluster through dagster-ray, whose resources connect the step's process to the cluster
before the step starts and disconnect it after; the stage's ``RayEngine`` then uses that connection.

``MARIN_ENGINE`` picks one for the definitions: ``local``, or ``ray`` for ``RayCluster``, which connects
to ``RAY_ADDRESS`` (a running cluster's GCS, e.g. a KubeRay head service's ``:6379``) or, without it,
starts a Ray cluster in the step's process. Any dagster-ray resource (``KubeRayCluster`` for a cluster
made per run) can be bound under the same key in code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dagster import ConfigurableResource
from dagster_ray import Lifecycle, RayResource

from marin_pipelines.engine import ENGINES, Engine, LocalEngine, RayEngine

ENGINE_VARIABLE = "MARIN_ENGINE"


class LocalEngineResource(ConfigurableResource):
    """Processes on the run's own machine: ``workers`` of them (default: its CPU limit)."""

    workers: int | None = None

    def engine(self) -> Engine:
        return LocalEngine(self.workers) if self.workers else LocalEngine()


class RayCluster(RayResource):
    """A Ray cluster that exists already, joined as a driver (not Ray Client): ``address`` is its GCS
    (``host:6379``); None reads ``RAY_ADDRESS`` when the step starts (or starts a cluster in its process)."""

    address: str | None = None
    lifecycle: Lifecycle = Lifecycle(cleanup="never")  # not ours to delete: the step only disconnects

    @property
    def host(self) -> str:
        return (self.address or os.environ.get("RAY_ADDRESS") or "127.0.0.1").split(":")[0]

    @property
    def ray_address(self) -> str | None:  # type: ignore[override]
        return self.address

    @property
    def name(self) -> str:
        return "RayCluster"

    @property
    def created(self) -> bool:
        return True

    @property
    def ready(self) -> bool:
        return True


def engine_of(resource: object) -> Engine:
    """The engine a bound resource stands for: a connected dagster-ray resource is a Ray cluster."""
    if isinstance(resource, RayResource):
        return RayEngine()
    if isinstance(resource, LocalEngineResource):
        return resource.engine()
    raise TypeError(f"'engine' must be a LocalEngineResource or a dagster-ray resource, not {resource!r}")


def engine_from_env(environ: Mapping[str, str]) -> LocalEngineResource | RayCluster:
    name = environ.get(ENGINE_VARIABLE) or "local"
    if name == "local":
        return LocalEngineResource()
    if name == "ray":
        return RayCluster(ray_init_options={"log_to_driver": False})
    raise ValueError(f"{ENGINE_VARIABLE}={name!r}: choose one of {', '.join(ENGINES)}")
