"""The plain-text summary `make demo` ends with, read back from the artifact store."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from marin_pipelines.documents import Funnel
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, ArtifactStore

if TYPE_CHECKING:
    from marin_pipelines.jobs.local import ExperimentRun

DOCUMENT_STAGES = ("web_documents", "extracted_text", "filtered_text", "deduplicated_text", "curated_text")


def experiment_summary(experiment: Experiment, store_root: str, run: ExperimentRun, seconds: float) -> str:
    store = ArtifactStore(store_root)
    versions = experiment.versions

    def get(stage: str, partition: str | None = None) -> Artifact:
        artifact = store.get([experiment.name, stage], versions[stage], partition)
        if artifact is None:
            raise FileNotFoundError(f"{experiment.name}/{stage} has no complete output under {store_root}")
        return artifact

    total, reused = len(run.materialized), run.reused
    work = "nothing recomputed, every output reused" if reused == total else f"{total - reused} computed"
    lines = [f"== {experiment.name}: {total} assets materialised in {seconds:.1f} s ({work})"]
    lines.append(f"   outputs under {store.root}")
    snapshots = experiment.snapshots
    lines.append(f"documents per stage, {len(snapshots)} snapshot(s) (in -> kept; removed by reason):")
    for stage in DOCUMENT_STAGES:
        partitions = snapshots if experiment.stages[stage].per_snapshot else [None]
        funnel = sum((Funnel.from_dict(get(stage, p).metadata["funnel"]) for p in partitions), Funnel())
        by_family = Counter()  # "gopher_repetition:dup_5_gram" counts under gopher_repetition
        for reason, n in funnel.removed.items():
            by_family[reason.split(":")[0]] += n
        reasons = ", ".join(f"{family} {n}" for family, n in by_family.most_common())
        lines.append(f"  {stage:<18} {funnel.docs_in:>6} -> {funnel.docs_out:>6}   {reasons or '-'}")
    cache = get("tokenized_cache").metadata
    lines.append(
        f"tokens: {cache['train_tokens']:,} train / {cache['validation_tokens']:,} validation, "
        f"vocabulary {cache['vocab_size']:,}"
    )
    ckpt, evals = get("checkpoint").metadata, get("eval_results").metadata
    lines.append(
        f"checkpoint: {ckpt['params']:,} params, {ckpt['tokens_seen']:,} tokens, train loss "
        f"{ckpt['initial_loss']:.3f} -> {ckpt['final_loss']:.3f}"
    )
    lines.append(f"eval: validation loss {evals['loss']:.3f}, bits-per-byte {evals['bits_per_byte']:.3f}")
    tasks = [
        f"{name} {value:.3f}"
        for name, value in evals["scores"].items()
        if not name.startswith(("bpb/", "loss/"))
    ]
    if tasks:
        lines.append(f"eval tasks: {', '.join(tasks)}")
    law, prediction = get("scaling_law").metadata, get("scaling_prediction").metadata
    lines.append(
        f"scaling ladder (validation loss; a unigram model scores {prediction['unigram_loss']:.3f}):"
    )
    for r in law["runs"]:
        lines.append(f"  {r['run']:<14} N={r['params']:>9,}  D={r['tokens']:>9,}  loss {r['loss']:.3f}")
    lines.append(f"fitted law ({law['method']}): {law['formula']}  (N non-embedding params, D tokens)")
    main, ladder_top = law["main_run"], max(r["budget"] for r in law["runs"])
    low, high = main["loss_interval"]
    lines.append(
        f"main run ({main['flops']:.2g} FLOPs, {main['flops'] / ladder_top:.0f}x the ladder's top budget), "
        f"preregistered before it ran: loss {main['predicted_loss']:.3f} [{low:.3f}, {high:.3f}], "
        f"actual {main['actual_loss']:.3f} ({100 * main['relative_error']:+.1f}%)"
    )
    lines += [f"  ladder warning: {warning}" for warning in prediction["warnings"]]
    board = get("speedrun_leaderboard").metadata
    if board["runs"]:
        lines.append(f"speedrun: {board['runs']} runs, `marin-pipelines leaderboard` prints the table")
    failed = run.failed_checks
    passed = len(run.checks) - len(failed)
    lines.append(f"asset checks: {passed} passed")
    lines += [f"  {'FAILED' if c.blocking else 'WARNING'}: {c} did not pass" for c in failed]
    return "\n".join(lines)
