"""The installed packages' source and documentation text as a document stage: a corpus of tens of millions
of tokens on every machine after ``make install``, with no download (``crawl/package_text.py``).

Its output has the document stages' layout and funnel (files considered in, documents out, files left
out per reason), so the tokenizer and the token cache read it as they read curated text.
"""

from __future__ import annotations

import importlib.metadata
import platform
from typing import Any

from marin_pipelines.crawl.package_text import PackageTextConfig, build_package_corpus
from marin_pipelines.stages.crawl import FUNNEL
from marin_pipelines.steps import StepContext, stage
from marin_pipelines.store import PendingArtifact


def installed_versions(config: PackageTextConfig) -> dict[str, Any]:
    """What the corpus is made of, cheaply: each distribution's installed version (pinned by the lock) and
    the Python release behind the standard library. The content hash of every file (``corpus_version``,
    seconds to compute) is the output's metadata; this is what versions the step when definitions load."""
    versions: dict[str, Any] = {}
    for name in config.distributions:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None  # the stage names it when it runs
    if config.include_stdlib:
        versions["python-stdlib"] = platform.python_version()
    return versions


@stage(
    PackageTextConfig,
    kinds=("parquet",),
    checks=FUNNEL,
    fingerprint=installed_versions,
)
def package_text(ctx: StepContext, out: PendingArtifact, config: PackageTextConfig) -> None:
    """Source code, docstrings and documents of the pinned installed packages (and the standard library)."""
    manifest = build_package_corpus(config, out.path)
    skipped = manifest["skipped"]
    out.metadata.update(
        funnel={
            "docs_in": manifest["documents"] + sum(skipped.values()),
            "docs_out": manifest["documents"],
            "removed": skipped,
        },
        corpus_version=manifest["version"],
        bytes=manifest["bytes"],
        sources=len(manifest["sources"]),
        kinds={kind: counts["documents"] for kind, counts in manifest["kinds"].items()},
        python=manifest["python"],
    )
