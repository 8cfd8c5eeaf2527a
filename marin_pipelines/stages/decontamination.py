"""Decontamination as a document step: the documents of any document step, less those that share a long
n-gram with the experiment's evaluation data (``text/decontaminated_text.py``), on the engine seam."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import REMOVED_PREFIX, list_shards, read_shard, run_stage
from marin_pipelines.evals.checkpoint_eval import heldout_fingerprint
from marin_pipelines.evals.evaluation_items import evaluation_items
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR
from marin_pipelines.stages.crawl import FUNNEL, Snapshots
from marin_pipelines.steps import InputError, StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.text.decontaminated_text import (
    DecontaminationConfig,
    NgramIndex,
    contamination_report,
    decontaminate,
    report_table,
)

FILE_SUFFIXES = (".txt", ".jsonl")  # item files; task YAMLs end in .yaml / .yml; anything else is a task name


class DecontaminateConfig(BaseModel):
    """What to decontaminate against, and how (``DecontaminationConfig``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    against: list[str] = Field(
        min_length=1, description="lm-eval task names or YAMLs, .txt (an item a line) and .jsonl files"
    )
    decontamination: DecontaminationConfig = Field(
        DecontaminationConfig(),
        description="shared n-gram length, prompt matching, and what becomes of a contaminated document",
    )


def against_content(config: DecontaminateConfig) -> Any:
    """The evaluation data's content: named files, task YAMLs' folders, and the shipped tasks when a task is
    named (an edited set decontaminates again)."""
    files = [e if not e.endswith((".yaml", ".yml")) else str(Path(e).parent) for e in config.against]
    files = [f for f in files if f.endswith(FILE_SUFFIXES) or Path(f).is_dir()]
    named = len(files) < len(config.against)
    return heldout_fingerprint({"files": files, **({"tasks": [str(SHIPPED_TASKS_DIR)]} if named else {})})


@stage(
    DecontaminateConfig,
    revision=2,  # 2: Unicode normalised on both sides; a question-answer item's prompt matched on its own
    kinds=("parquet",),
    checks=FUNNEL,
    needs=("engine",),
    fingerprint=against_content,
)
def decontaminated_text(
    ctx: StepContext, out: PendingArtifact, config: DecontaminateConfig, text: Artifact | Snapshots
) -> None:
    """The documents of ``text`` less those sharing a 13-gram (or a whole short item, or a question-answer
    item's prompt on its own) with an evaluation item: the lm-eval tasks, held-out and chat sets the
    experiment evaluates on. Removed documents keep the sets and items they matched; the metadata counts them
    per set, and which items of each set are in the training data."""
    try:
        index = NgramIndex(evaluation_items(config.against), config.decontamination)
    except (ValueError, FileNotFoundError) as e:
        raise InputError(f"{ctx.step.name}: against: {e}") from None
    ctx.log(f"{ctx.step.name}: {len(index.items)} evaluation items indexed from {len(index.suites)} sets")
    sources = [a.url for _, a in sorted(text.items())] if isinstance(text, dict) else [text.url]  # snapshots
    funnel = run_stage(decontaminate, index, sources, out.work, ctx.engine, ctx.progress("shards"))
    out.keep_work()
    marked = config.decontamination.action == "mark"
    shards = list_shards(out.work) if marked else list_shards(out.work, REMOVED_PREFIX)
    report = contamination_report((doc for shard in shards for doc in read_shard(shard)), index)
    out.metadata.update(
        funnel=funnel.as_dict(),
        contaminated_documents=report["documents"],
        markdown={"contamination": report_table(report["per_set"])},
        contamination=report["per_set"],
        items_in_training_data=report["items_in_training_data"],
        examples=report["examples"],
    )
