"""Evaluation of checkpoints, and the comparison of an ablation's variants.

An evaluation reports bits-per-byte on each training-mixture source's validation split, on further
caches' validation splits and on held-out text sets, and lm-eval task scores, with the change against
the step's previous version. It goes through the launcher, as training does: the child writes
``results.json`` into the pending output directory and reports where it ran.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from marin_pipelines.evals.checkpoint_eval import (
    EvalConfig,
    heldout_fingerprint,
    missing_tasks,
    results_table,
    scores,
)
from marin_pipelines.evals.comparison import (
    Claim,
    Variant,
    check_plan,
    compare_variants,
)
from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE, combine_bpb
from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.evals.standard_suite import STANDARD_TASKS, standard_suite
from marin_pipelines.scaling.seed_noise import SeedNoise
from marin_pipelines.stages.sft import HELDOUT_CHATS
from marin_pipelines.steps import Check, Step, StepContext, stage
from marin_pipelines.store import Artifact, ArtifactStore, PendingArtifact, read_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE

RESULTS = "results.json"
CHAT_INPUT = "chat_"  # an input chat_NAME is a chat_data step: its held-out conversations are chat set NAME
LABEL = r"^[a-z][a-z0-9_]*$"


class EvalStepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    evals: EvalConfig = Field(EvalConfig(), description="held-out bits-per-byte sets and lm-eval tasks")
    batch_size: int = Field(EVAL_BATCH_SIZE, ge=1, description="sequences per forward pass of an evaluation")


def heldout_content(config: EvalStepConfig) -> Any:
    """Held-out sets version the evaluation by content: a set edited in place re-evaluates."""
    chat = {f"chat/{name}": paths for name, paths in config.evals.chat.items()}
    return heldout_fingerprint({**config.evals.heldout, **chat}) or None


def tasks_scored(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """Every requested lm-eval task produced a number."""
    requested = artifact.metadata["tasks"]
    missing = missing_tasks(requested, artifact.metadata["scores"])
    return not missing, {"requested": len(requested), "missing": ", ".join(missing) or "none"}


RUNG_FIELDS = ("budget_flops", "shape", "seed")  # a ladder rung's place, from its checkpoint to the law


@stage(
    EvalStepConfig,
    revision=2,
    group="evals",
    kinds=("jax",),
    checks={"tasks_scored": Check(tasks_scored)},
    needs=("launcher",),
    fingerprint=heldout_content,
    headline=("loss", "bits_per_byte"),
)
def eval_results(
    ctx: StepContext,
    out: PendingArtifact,
    config: EvalStepConfig,
    checkpoint: Artifact,
    tokenized_cache: Artifact,
    tokenizer: Artifact,
    **caches: Artifact,
) -> None:
    """Loss and bits-per-byte per validation source and held-out set, and lm-eval task scores.

    ``loss`` is over the checkpoint's training mixture (what a scaling law fits); further caches given as
    inputs are scored as sets of their own (``bpb/NAME``), e.g. one text every variant of an ablation
    is measured on."""
    validation = {name: [url] for name, url in training_sources(checkpoint, tokenized_cache).items()}
    chats = {
        k.removeprefix(CHAT_INPUT): [f"{a.url}/{HELDOUT_CHATS}"]
        for k, a in caches.items()
        if k.startswith(CHAT_INPUT)
    }
    sets = {**validation, **{n: [a.url] for n, a in caches.items() if not n.startswith(CHAT_INPUT)}}
    evals = config.evals.model_copy(update={"chat": {**config.evals.chat, **chats}})
    launch = EvalLaunch(
        checkpoint=checkpoint.url,
        tokenizer=f"{tokenizer.url}/{TOKENIZER_FILE}",
        bpb=sets,
        evals=evals,
        batch_size=config.batch_size,
        out=f"{out.work}/{RESULTS}",  # the child may be a pod: it writes into the store
    )
    results = launch_evaluation(ctx, out, launch)
    flat = record_results(out, results, list(validation), config.evals.tasks, checkpoint.metadata)
    table = {"results": results_table(flat)}
    previous = next(
        (
            a.metadata["scores"]
            for a in ctx.store.others(ctx.step.key, ctx.step.version, ctx.partition)
            if "scores" in a.metadata
        ),
        None,
    )
    if previous is not None:
        table["change against the previous version"] = results_table(flat, previous)
    found = decontaminated_items(ctx.store, training_sources(checkpoint, tokenized_cache).values())
    if found:  # the reverse report: which items of each set a decontamination upstream found in the text
        out.metadata["items_found_in_training_text"] = found
        table["items found in the training text"] = "\n".join(
            [
                "Found by decontamination upstream of the training data (removed, unless only marked):",
                "",
                "| set | items |",
                "|---|---|",
                *(f"| {suite} | {', '.join(items)} |" for suite, items in found.items()),
            ]
        )
    out.metadata["markdown"] = table


def launch_evaluation(ctx: StepContext, out: PendingArtifact, launch: EvalLaunch) -> dict[str, Any]:
    """The evaluation through the launcher; its results (kept with the output) and where it ran recorded."""
    messages = ctx.launcher.evaluate(launch)
    results = json.loads(read_url(launch.out))
    out.keep_work()
    reported = [m["evaluated_on"] for m in messages if isinstance(m, dict) and "evaluated_on" in m]
    if not reported:  # the results are in the file; only where they were computed is unknown
        ctx.log("warning: the evaluation sent no summary message: evaluated_on is not reported")
    out.metadata["evaluated_on"] = reported[-1] if reported else "not reported"
    return results


def record_results(
    out: PendingArtifact,
    results: dict[str, Any],
    validation: list[str],
    tasks: list[str],
    trained: dict[str, Any],
) -> dict[str, float]:
    """The evaluation's numbers in the output's metadata: the loss over the ``validation`` sets together
    (what a scaling law fits and predicts: the training mixture's held-out loss), the run's size and
    compute (``trained``: its summary; N is non-embedding params, as at these sizes embeddings dominate the
    count) and every score. Returns the scores."""
    flat = scores(results)
    if validation:
        combined = combine_bpb([results["bpb"][name] for name in validation])
        out.metadata.update(loss=combined["loss"], bits_per_byte=combined["bits_per_byte"])
    out.metadata.update(
        params=trained.get("non_embedding_params"),
        train_tokens=trained.get("tokens_seen"),
        flops=trained.get("flops"),
        scores=flat,
        tasks=tasks,
        **{field: trained[field] for field in RUNG_FIELDS if field in trained},  # which rung, on a ladder
    )
    return flat


def decontaminated_items(store: ArtifactStore, caches: Iterable[str]) -> dict[str, list[str]]:
    """The evaluation items that decontamination steps upstream of the training caches found in the text
    (``items_in_training_data``), walking the manifests' records of their inputs (unpartitioned steps: a
    decontamination reads every snapshot and is not partitioned itself)."""
    found: dict[str, set[str]] = {}
    todo = [manifest for url in caches if (manifest := _manifest(url)) is not None]
    seen: set[str] = set()
    while todo:
        manifest = todo.pop()
        for suite, items in manifest.get("metadata", {}).get("items_in_training_data", {}).items():
            found.setdefault(suite, set()).update(items)
        for ref in set(manifest.get("upstream", {}).values()) - seen:
            seen.add(ref)
            name, _, version = ref.rpartition("@")
            if (upstream := store.get(name.split("/"), version)) is not None:
                todo.append(upstream.manifest)
    return {suite: sorted(items) for suite, items in sorted(found.items()) if items}


def _manifest(url: str) -> dict[str, Any] | None:
    """A cache's manifest; None for a cache made outside the store (``marin-pipelines tokenize``): no
    lineage to walk."""
    try:
        return json.loads(read_url(f"{url.rstrip('/')}/manifest.json"))
    except FileNotFoundError:
        return None


def training_sources(checkpoint: Artifact, tokenized_cache: Artifact) -> dict[str, str]:
    """The caches a run trained on, by mixture source (a fine-tuned run's: its base's training cache)."""
    if "data_sources" in checkpoint.metadata:
        return checkpoint.metadata["data_sources"]
    mixture = MixtureConfig.model_validate(checkpoint.manifest["config"].get("data_mixture", {}))
    return mixture.cache_urls(tokenized_cache.url)


class StandardEvalConfig(BaseModel):
    """One finished run, evaluated on the standard suite (``evals/standard_suite.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: str = Field(description="the run folder, a path or URL: a step's output or a command's --out")
    tasks: list[str] = Field(
        default_factory=lambda: list(STANDARD_TASKS),
        description="lm-eval tasks (default: every shipped one; a generative task whose answers do not fit "
        "the run's context is left out and said in tasks_left_out)",
    )
    batch_size: int = Field(EVAL_BATCH_SIZE, ge=1, description="sequences per forward pass of an evaluation")


def run_content(config: StandardEvalConfig) -> str:
    """The run's ``train.json`` (its steps, losses, when it started): a run trained further, or made again
    in the same folder, is another checkpoint and is evaluated again."""
    try:
        return hashlib.sha256(read_url(f"{config.checkpoint.rstrip('/')}/train.json").encode()).hexdigest()
    except FileNotFoundError:
        return "missing"


@stage(
    StandardEvalConfig,
    group="leaderboard",
    kinds=("jax",),
    checks={"tasks_scored": Check(tasks_scored)},
    needs=("launcher",),
    fingerprint=run_content,
    headline=("loss", "bits_per_byte"),
)
def standard_evaluation(ctx: StepContext, out: PendingArtifact, config: StandardEvalConfig) -> None:
    """One finished run on the standard suite: the shipped tasks (through its chat template if it is a
    chat model), bits-per-byte on the caches it (or its base) trained on, its held-out chats. What the
    new-checkpoints sensor runs on every run that lands in the store, for the leaderboard."""
    bpb, evals, left_out = standard_suite(config.checkpoint, tuple(config.tasks))
    for task, why in left_out.items():
        ctx.log(f"{ctx.step.name}: {task} left out: {why}")
    launch = EvalLaunch(
        checkpoint=config.checkpoint,
        bpb=bpb,
        evals=evals,
        batch_size=config.batch_size,
        out=f"{out.work}/{RESULTS}",
    )
    results = launch_evaluation(ctx, out, launch)
    trained = json.loads(read_url(f"{config.checkpoint.rstrip('/')}/train.json")).get("summary") or {}
    flat = record_results(out, results, list(bpb), evals.tasks, trained)
    out.metadata["tasks_left_out"] = left_out
    out.metadata["markdown"] = {"results": results_table(flat)}


STANDARD_EVAL = "leaderboard/standard_eval"  # the step (and asset) name of every standard evaluation


def standard_eval_step(run: str) -> Step:
    """The standard evaluation of the run folder ``run`` (partitioned by the run's place in the store)."""
    return Step(STANDARD_EVAL, standard_evaluation, StandardEvalConfig(checkpoint=run))


# the same evaluation for every rung of a ladder, partitioned as its checkpoints
ladder_eval_results = replace(
    eval_results, name="ladder_eval_results", group="scaling", partitioning="ladder"
)


class CompareConfig(BaseModel):
    """The variants of an ablation, in order (the first is the baseline when no claim names another), what
    the experiment tests and how the verdict judges it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variants: list[str] = Field(
        min_length=2, description="labels; inputs are LABEL_eval and LABEL_checkpoint"
    )
    hypothesis: str = Field(
        "",
        description="what the experiment tests, in words, shown with the verdict; a band it states "
        "('within 1%') must be tolerance",
    )
    metrics: list[str] = Field(
        default_factory=list,
        description="the table's scores the hypothesis is about (the first decides 'best'), e.g. "
        "'chat/demo_chat', 'bpb/main'; none: the own-data validation loss",
    )
    claims: list[Claim] = Field(
        default_factory=list,
        description="the hypothesis's clauses, each a variant better / the same / worse / not worse than "
        "another; none: each variant is set against the first and the verdict cannot tell",
    )
    tolerance: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="the relative band within which two values are the same, as the hypothesis states it "
        "('within 1%': 0.01); none: measured from seeds where given, else no band",
    )
    seeds: dict[str, list[str]] = Field(
        default_factory=dict,
        description="an arm -> the variants that are it with other seeds: their spread is the tolerance "
        "where none is declared",
    )
    noise: SeedNoise | None = Field(
        None,
        description="a run's relative seed noise measured elsewhere and where (relative, source; the "
        "project's: MEASURED_SEED_NOISE), for a hypothesis that states no band: the tolerance is the band "
        "it gives (2 x sqrt 2 x it), said with its source, where the seeds measure none",
    )

    @field_validator("variants")
    @classmethod
    def _labels(cls, labels: list[str]) -> list[str]:
        bad = [label for label in labels if not re.fullmatch(LABEL, label)]
        if bad or len(set(labels)) < len(labels):
            raise ValueError(f"variant labels must be distinct lowercase identifiers, got {labels}")
        return labels

    @model_validator(mode="after")
    def _a_judgeable_plan(self) -> CompareConfig:
        check_plan(
            self.variants, self.hypothesis, self.metrics, self.claims, self.tolerance, self.seeds, self.noise
        )
        return self


# revision 2: the params a token uses (an MoE's active params) in the table; 3: the verdict on the
# hypothesis' metrics first, own-data rows named, the loss-minus-baseline plot, no JSON repeats; 4: whether
# the hypothesis held, on its claims, within a tolerance; the best among arms of one budget; params counted
# non-embedding; a continuation's FLOPs with its base's; 5: a tolerance from a seed noise measured elsewhere,
# and a band the hypothesis does not state said, with its source, in the verdict's first line
@stage(CompareConfig, revision=5, group="evals", kinds=("matplotlib",))
def comparison(ctx: StepContext, out: PendingArtifact, config: CompareConfig, **runs: Artifact) -> None:
    """The variants side by side: whether the hypothesis held, loss curves overlaid, validation loss,
    bits-per-byte per set, task scores, tokens and FLOPs, with the experiment's hypothesis."""
    variants = [
        Variant(label, runs[f"{label}_checkpoint"].url, runs[f"{label}_eval"].metadata)
        for label in config.variants
    ]
    out.metadata.update(
        compare_variants(
            variants,
            config.hypothesis,
            out.path,
            config.metrics,
            config.claims,
            config.tolerance,
            config.seeds,
            config.noise,
        )
    )
