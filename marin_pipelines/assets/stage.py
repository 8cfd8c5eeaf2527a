"""`stage_asset`: one decorator that turns a core-library call into a versioned Dagster asset.

The decorated function only builds the output into a pending directory. The decorator supplies what
every stage shares: the version as code_version (so the UI marks stale assets), reuse of a complete
output of the same version, atomic writes, metadata (counts, bytes, wall time, funnel, plots) and the
asset checks.
"""

import base64
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    MetadataValue,
    Output,
    PartitionsDefinition,
    asset,
)

from marin_pipelines.documents import Funnel
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.store import VERSION_KEY
from marin_pipelines.store import Artifact

log = logging.getLogger(__name__)
Check = Callable[[Artifact], tuple[bool, dict[str, Any]]]  # artifact -> (passed, metadata)


def funnel_conserved(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """Every document that came in was either kept or removed for a named reason."""
    funnel = Funnel.from_dict(artifact.metadata["funnel"])
    removed = sum(funnel.removed.values())
    return funnel.conserved, {"docs_in": funnel.docs_in, "docs_out": funnel.docs_out, "removed": removed}


def stage_asset(
    experiment: Experiment,
    stage: str,
    *,
    group: str,
    ins: tuple[str, ...] = (),
    checks: dict[str, Check] | None = None,
    partitions_def: PartitionsDefinition | None = None,
    resources: tuple[str, ...] = (),
) -> Callable[[Callable[..., None]], AssetsDefinition]:
    """Decorate ``build(out: PendingArtifact, **upstream: Artifact)``; ``ins`` names upstream stages.

    ``resources`` names further Dagster resources that ``build`` receives as keyword arguments.
    """
    checks = checks or {}
    version = experiment.versions[stage]
    key = AssetKey([experiment.name, stage])

    def decorator(build: Callable[..., None]) -> AssetsDefinition:
        @asset(
            name=stage,
            key_prefix=[experiment.name],
            group_name=f"{experiment.name}_{group}",
            description=build.__doc__,
            code_version=version,
            metadata={VERSION_KEY: version},
            ins={name: AssetIn(key=[experiment.name, name]) for name in ins},
            partitions_def=partitions_def,
            required_resource_keys={"store", *resources},
            check_specs=[
                AssetCheckSpec(name, asset=key, description=check.__doc__) for name, check in checks.items()
            ],
        )
        def compute(context: AssetExecutionContext, **upstream: Artifact) -> Iterator[Any]:
            store = context.resources.store.store()
            partition = context.partition_key if context.has_partition_key else None
            artifact = store.get(key.path, version, partition)
            reused = artifact is not None
            name = key.to_user_string() + (f" [{partition}]" if partition else "")
            if artifact is not None:
                _say(context, f"{name}: reused version {version}, nothing recomputed ({artifact.path})")
            else:
                _say(context, f"{name}: computing version {version}")
                started = time.perf_counter()
                with store.write(key.path, version, partition, experiment.stage_config(stage)) as pending:
                    build(pending, **upstream, **{r: getattr(context.resources, r) for r in resources})
                artifact = store.get(key.path, version, partition)
                assert artifact is not None
                _say(context, f"{name}: done in {time.perf_counter() - started:.1f} s ({artifact.path})")
            yield Output(artifact, metadata=dagster_metadata(artifact, reused))
            for name, check in checks.items():
                passed, check_metadata = check(artifact)
                yield AssetCheckResult(asset_key=key, check_name=name, passed=passed, metadata=check_metadata)

        return compute

    return decorator


def _say(context: AssetExecutionContext, message: str) -> None:
    """To the run's event log (UI) and to the terminal of `make demo` (python logging)."""
    context.log.info(message)
    log.info(message)


def dagster_metadata(artifact: Artifact, reused: bool) -> dict[str, Any]:
    """Manifest -> UI metadata: scalars as numbers (plotted over time), the funnel as a table."""
    files = artifact.manifest["files"]
    out: dict[str, Any] = {
        "path": MetadataValue.path(str(artifact.path)),
        "version": artifact.version,
        "reused": reused,
        "files": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "wall_seconds": artifact.manifest["wall_seconds"],
    }
    for name, value in artifact.metadata.items():
        if name == "funnel":
            out.update(funnel_metadata(Funnel.from_dict(value)))
        elif name == "plots":
            for title, filename in value.items():
                out[title] = png_markdown(artifact, title, filename)
        elif name == "markdown":
            out.update({title: MetadataValue.md(text) for title, text in value.items()})
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = MetadataValue.json(value)
    return out


def funnel_metadata(funnel: Funnel) -> dict[str, Any]:
    rows = [("in", funnel.docs_in), ("kept", funnel.docs_out)]
    rows += [(f"removed: {reason}", n) for reason, n in funnel.removed.most_common()]
    table = "| documents | count |\n|---|---:|\n" + "\n".join(f"| {label} | {n} |" for label, n in rows)
    return {
        "docs_in": funnel.docs_in,
        "docs_out": funnel.docs_out,
        "docs_removed": sum(funnel.removed.values()),
        "funnel": MetadataValue.md(table),
    }


def png_markdown(artifact: Artifact, title: str, filename: str) -> MetadataValue:
    data = base64.b64encode(artifact.file(filename).read_bytes()).decode()
    return MetadataValue.md(f"![{title}](data:image/png;base64,{data})")
