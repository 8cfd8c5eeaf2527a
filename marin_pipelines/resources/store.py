"""The artifact store as Dagster resources: where outputs live, and how assets hand them on."""

from dagster import (
    ConfigurableIOManager,
    ConfigurableResource,
    InputContext,
    OutputContext,
    ResourceDependency,
)
from pydantic import Field

from marin_pipelines.store import Artifact, ArtifactStore, default_store_root

WHOLE_INPUT = "marin/whole_input"  # an input's metadata: load every partition of it (defs/step_assets.py)

VERSION_KEY = "marin/version"


class ArtifactStoreResource(ConfigurableResource):
    """Root of the versioned outputs: a local folder by default (`.marin/store`)."""

    root: str = Field(default_factory=default_store_root, description="folder holding every asset's outputs")

    def store(self) -> ArtifactStore:
        return ArtifactStore(self.root)


class ArtifactIOManager(ConfigurableIOManager):
    """Hands artifacts on by version: an input is the upstream's complete directory, never a pickle.

    Assets write their own outputs atomically; this only finds them again, so a run in another process
    (or on another machine sharing the store) sees exactly what the upstream run wrote.
    """

    store: ResourceDependency[ArtifactStoreResource]

    def handle_output(self, context: OutputContext, obj: Artifact) -> None:
        context.log.debug(f"{context.asset_key.to_user_string()} -> {obj.path}")

    def load_input(self, context: InputContext) -> Artifact | dict[str, Artifact]:
        upstream = context.upstream_output
        assert upstream is not None
        version = upstream.definition_metadata[VERSION_KEY]
        asset_path = upstream.asset_key.path
        whole = (context.definition_metadata or {}).get(WHOLE_INPUT)  # another crawl's, read whole
        if context.has_asset_partitions and (whole or not context.has_partition_key):  # or of a ladder
            return {key: self._get(asset_path, version, key) for key in context.asset_partition_keys}
        partition = context.asset_partition_key if context.has_asset_partitions else None
        return self._get(asset_path, version, partition)

    def _get(self, asset_path: list[str], version: str, partition: str | None) -> Artifact:
        artifact = self.store.store().get(asset_path, version, partition)
        if artifact is None:
            where = f" partition {partition}" if partition else ""
            raise FileNotFoundError(
                f"{'/'.join(asset_path)}{where} version {version} has not been materialised "
                f"(no complete output under {self.store.root}); materialise it first"
            )
        return artifact
