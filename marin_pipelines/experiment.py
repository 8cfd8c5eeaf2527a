"""An experiment declared in code: every stage's config, and the version of every stage's output.

A stage's version hashes its own config, its code revision and its upstream versions (the Marin
executor's rule), so the same inputs and config always map to the same output path and nothing is
recomputed, while a change to one stage's config recomputes that stage and everything downstream.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig
from marin_pipelines.crawl.snapshots import crawl_fingerprint, crawl_snapshots
from marin_pipelines.crawl.web_documents import WebDocumentsConfig
from marin_pipelines.evals.checkpoint_eval import EvalConfig, heldout_fingerprint
from marin_pipelines.quality.annotation import DatashopConfig
from marin_pipelines.quality.curated_text import CurationConfig
from marin_pipelines.quality.quality_scores import QualityConfig
from marin_pipelines.scaling.scaling_law import LadderConfig
from marin_pipelines.scaling.speedrun import discover_submissions
from marin_pipelines.store import version_hash
from marin_pipelines.text.deduplicated_text import DedupConfig
from marin_pipelines.text.extracted_text import ExtractConfig
from marin_pipelines.text.filtered_text import FilterConfig
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import CacheConfig
from marin_pipelines.tokenize.tokenizer import TokenizerConfig
from marin_pipelines.train.checkpoint import TrainConfig
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig, preset


class ExperimentError(ValueError):
    """An experiment that cannot run: the message names the field and what is allowed."""


class CrawlConfig(BaseModel):
    """Where the WARC files come from: a folder of the user's, or the embedded demo crawl."""

    model_config = ConfigDict(extra="forbid")

    warc_root: str | None = Field(
        None,
        description="folder or gs:// prefix of snapshot folders (or of WARC/ARC files: one snapshot); "
        "None builds the demo crawl",
    )
    demo: DemoCrawlConfig = DemoCrawlConfig()


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: str = Field("micro", description="a name from MODEL_SIZES")
    seq_len: int = Field(128, ge=8)

    @field_validator("size")
    @classmethod
    def _known_size(cls, size: str) -> str:
        if size not in MODEL_SIZES:
            raise ValueError(f"unknown model size {size!r}; choose one of {sorted(MODEL_SIZES)}")
        return size


class Experiment(BaseModel):
    """Every stage's config; the graph of stages is fixed (STAGES), the experiment fills it in."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = ""
    crawl: CrawlConfig = CrawlConfig()
    web_documents: WebDocumentsConfig = WebDocumentsConfig()
    extract: ExtractConfig = ExtractConfig()
    filters: FilterConfig = FilterConfig()
    dedup: DedupConfig = DedupConfig()
    quality: QualityConfig = QualityConfig()
    datashop: DatashopConfig | None = Field(
        None, description="label a crawl sample with an annotator and train the classifier on the labels"
    )
    curation: CurationConfig = CurationConfig(top_fraction=0.8)
    tokenizer: TokenizerConfig = TokenizerConfig()
    cache: CacheConfig = CacheConfig()
    data_mixture: MixtureConfig = Field(
        MixtureConfig(), description="token caches and their weights in every training batch"
    )
    model: ModelChoice = ModelChoice()
    train: TrainConfig = TrainConfig()
    eval_batch_size: int = Field(16, ge=1)
    evals: EvalConfig = Field(
        EvalConfig(), description="held-out bits-per-byte sets and lm-eval tasks for every checkpoint"
    )
    workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="processes for the per-document stages (not versioned: outputs do not depend on it)",
    )
    ladder: LadderConfig = LadderConfig()
    speedrun: list[str] = Field(
        default_factory=list, description="speedrun submissions (names under experiments/speedrun/) to run"
    )

    @field_validator("speedrun")
    @classmethod
    def _known_submissions(cls, names: list[str]) -> list[str]:
        known = {s.name for s in discover_submissions()}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"unknown speedrun submissions {unknown}; allowed: {sorted(known)}")
        return names

    @classmethod
    def build(cls, **fields: Any) -> Experiment:
        """Validate, turning pydantic's report into one clear error naming each bad field."""
        try:
            return cls(**fields)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(experiment)'}: {err['msg']}"
                for err in e.errors()
            )
            raise ExperimentError(f"invalid experiment {fields.get('name', '?')!r}: {problems}") from None

    @property
    def target(self) -> dict[str, Any] | None:
        """The preregistered target's budget and training rule (``LadderConfig.target``): versions the
        main run, which trains by the ladder's rule for ``ladder.target_budget`` FLOPs when one is set."""
        return self.ladder.target()

    @property
    def speedrun_submissions(self) -> dict[str, Any]:
        """The chosen submissions' full configs: editing a submission file reruns the leaderboard."""
        return {s.name: s.model_dump() for s in discover_submissions() if s.name in self.speedrun}

    def main_run(self, vocab_size: int) -> tuple[LlamaConfig, TrainConfig]:
        """The main checkpoint's model and training: ``train`` as given, or the ladder's next rung."""
        size, seq_len = self.model.size, self.model.seq_len
        if self.ladder.target_budget is None:
            return preset(size, vocab_size, seq_len), self.train
        run = self.ladder.run(size, self.ladder.target_budget, vocab_size, seq_len, self.train)
        return run.model, run.train

    def stage_config(self, stage: str) -> dict[str, Any]:
        """The config that versions a stage (its own fields only)."""
        return {name: _dump(getattr(self, name)) for name in self.stages[stage].config}

    @cached_property
    def stages(self) -> dict[str, Stage]:
        """STAGES, plus Datashop's labelling stage feeding quality_scores when the experiment has one."""
        if self.datashop is None:
            return STAGES
        stages: dict[str, Stage] = {}
        for name, stage in STAGES.items():
            if name == "quality_scores":
                stages["quality_labels"] = QUALITY_LABELS
                deps, config = (*stage.deps, "quality_labels"), (*stage.config, "datashop")
                stage = replace(stage, deps=deps, config=config)
            stages[name] = stage
        return stages

    @cached_property
    def versions(self) -> dict[str, str]:
        try:
            snapshots = self.snapshots
        except (FileNotFoundError, ValueError):
            snapshots = []  # the crawl asset raises the clear error when it runs
        return self.stage_versions(self._crawl_fingerprint(), snapshots)

    def stage_versions(self, crawl_input: Any, snapshots: list[str]) -> dict[str, str]:
        """Every stage's version for a crawl whose content is ``crawl_input``, made of ``snapshots``.

        Per-snapshot stages (partitions) do not depend on which snapshots exist, so a new snapshot
        recomputes nothing already done; the first stages that read every snapshot do.
        """
        out: dict[str, str] = {}
        heldout = heldout_fingerprint(self.evals.heldout)  # by content: a set edited in place re-evaluates
        for name, stage in self.stages.items():  # insertion order is topological
            payload = {
                "stage": name,
                "revision": stage.revision,
                "config": self.stage_config(name),
                "upstream": {dep: out[dep] for dep in stage.deps},
            }
            if name == "crawl":
                payload["input"] = crawl_input
            if "evals" in stage.config and heldout:
                payload["heldout"] = heldout
            if not stage.per_snapshot and any(self.stages[dep].per_snapshot for dep in stage.deps):
                payload["snapshots"] = snapshots
            out[name] = version_hash(payload)
        return out

    @property
    def snapshots(self) -> list[str]:
        """The crawl's snapshot keys, read from the crawl root now (``crawl/snapshots.py``)."""
        return crawl_snapshots(self.crawl.warc_root)

    def _crawl_fingerprint(self) -> Any:
        """What the crawl's content depends on: a single-snapshot root's files, or the demo's Python."""
        if self.crawl.warc_root is None:
            return {"python": platform.python_version()}
        return crawl_fingerprint(self.crawl.warc_root)


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


@dataclass(frozen=True)
class Stage:
    deps: tuple[str, ...]
    config: tuple[str, ...]
    revision: int = 1  # bump when a stage's logic changes so old outputs are not reused
    per_snapshot: bool = False  # partitioned by crawl snapshot


STAGES: dict[str, Stage] = {
    "crawl": Stage((), ("crawl",), revision=2, per_snapshot=True),
    "web_documents": Stage(("crawl",), ("web_documents",), revision=2, per_snapshot=True),
    "extracted_text": Stage(("web_documents",), ("extract",), revision=2, per_snapshot=True),
    "filtered_text": Stage(("extracted_text",), ("filters",), revision=2, per_snapshot=True),
    "deduplicated_text": Stage(("filtered_text",), ("dedup",), revision=2, per_snapshot=True),
    "quality_scores": Stage(("deduplicated_text",), ("quality",), revision=2),
    "curated_text": Stage(("deduplicated_text", "quality_scores"), ("curation",), revision=2),
    "tokenizer": Stage(("curated_text",), ("tokenizer",)),
    # revision 3: a build of >= 2 documents always has a validation document
    "tokenized_cache": Stage(("curated_text", "tokenizer"), ("cache",), revision=3),
    # revision 2: orbax; "target": a preregistered ladder target sizes the main run
    "checkpoint": Stage(("tokenized_cache",), ("model", "train", "data_mixture", "target"), revision=2),
    # revision 2: every mixture source's validation split, held-out sets and lm-eval tasks
    "eval_results": Stage(
        ("checkpoint", "tokenized_cache", "tokenizer"), ("eval_batch_size", "evals"), revision=2
    ),
    "ladder_checkpoint": Stage(
        ("tokenized_cache",), ("model", "train", "ladder", "data_mixture"), revision=2
    ),
    "ladder_eval_results": Stage(
        ("ladder_checkpoint", "tokenized_cache", "tokenizer"), ("eval_batch_size", "evals"), revision=2
    ),
    # the preregistered prediction depends on the ladder only, never on the run it predicts;
    # revision 2: the ladder's diagnostics (unigram baseline, target epochs)
    "scaling_prediction": Stage(
        ("ladder_eval_results", "tokenized_cache"), ("model", "train", "ladder"), revision=2
    ),
    "scaling_law": Stage(("scaling_prediction", "eval_results"), (), revision=2),
    "speedrun_leaderboard": Stage(
        ("tokenized_cache", "tokenizer"), ("speedrun_submissions", "eval_batch_size")
    ),
}

# Only in experiments that declare a Datashop config (Experiment.stages puts it before quality_scores).
QUALITY_LABELS = Stage(("deduplicated_text",), ("datashop",))


def default_store_root() -> str:
    """`.marin/store` under the working directory unless MARIN_STORE_ROOT says otherwise."""
    return os.environ.get("MARIN_STORE_ROOT", str(Path.cwd() / ".marin" / "store"))
