"""The plain-text summary `make demo` ends with, read back from the artifact store."""

from __future__ import annotations

from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, ArtifactStore

DOCUMENT_STAGES = ("web_documents", "extracted_text", "filtered_text", "deduplicated_text", "curated_text")


def experiment_summary(
    experiment: Experiment, store_root: str, computed: int, reused: int, seconds: float
) -> str:
    store = ArtifactStore(store_root)
    versions = experiment.versions

    def get(stage: str, partition: str | None = None) -> Artifact:
        artifact = store.get([experiment.name, stage], versions[stage], partition)
        if artifact is None:
            raise FileNotFoundError(f"{experiment.name}/{stage} has no complete output under {store_root}")
        return artifact

    work = (
        "nothing recomputed, every output reused"
        if computed == 0
        else f"{computed} computed, {reused} reused"
    )
    lines = [f"== {experiment.name}: {computed + reused} assets materialised in {seconds:.1f} s ({work})"]
    lines.append(f"   outputs under {store.root}")
    lines.append("documents per stage (in -> kept; removed by reason):")
    for stage in DOCUMENT_STAGES:
        funnel = get(stage).metadata["funnel"]
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(funnel["removed"].items(), key=lambda x: -x[1]))
        lines.append(f"  {stage:<18} {funnel['docs_in']:>6} -> {funnel['docs_out']:>6}   {reasons or '-'}")
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
    law = get("scaling_law").metadata
    lines.append("scaling ladder (validation loss):")
    for run in law["runs"]:
        lines.append(
            f"  {run['run']:<14} N={run['params']:>9,}  D={run['tokens']:>9,}  loss {run['loss']:.3f}"
        )
    fit = f"L = {law['A']:.3g} * N^-{law['alpha']:.3f} * D^-{law['beta']:.3f}"
    lines.append(f"fitted law: {fit}  (R^2 {law['r2']:.3f}, N non-embedding params, D tokens)")
    main = law["main_run"]
    lines.append(
        f"main run predicted from the ladder: loss {main['predicted_loss']:.3f}, actual {main['loss']:.3f} "
        f"({100 * main['relative_error']:+.1f}%)"
    )
    return "\n".join(lines)
