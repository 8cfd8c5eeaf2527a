"""The plain-text summary of each experiment a run of experiments (`make demo`) prints, read back from the
artifact store, and the short wrap-up it ends with.

A summary covers whatever steps the experiment has: document funnels, tokens, each run and its evaluation, an
IsoFLOP ladder's preregistered forecast against its target, the speedrun, and a comparison's table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marin_pipelines.documents import REMOVED_PREFIX, Funnel, list_shards, read_shard
from marin_pipelines.experiment import Experiment
from marin_pipelines.steps import CheckOutcome, Step
from marin_pipelines.store import Artifact, ArtifactStore

if TYPE_CHECKING:
    from marin_pipelines.defs.local_run import ExperimentRun


def experiment_summary(experiment: Experiment, store_root: str, run: ExperimentRun, seconds: float) -> str:
    store = ArtifactStore(store_root)

    def get(step: Step, partition: str | None = None) -> Artifact:
        artifact = store.get(step.key, step.version, partition)
        if artifact is None:
            raise FileNotFoundError(f"{step.name} has no complete output under {store_root}")
        return artifact

    def of(stage: str) -> list[Step]:
        return [s for s in experiment.all_steps if s.stage.name == stage]

    total, reused = len(run.materialized), run.reused
    work = "nothing recomputed, every output reused" if reused == total else f"{total - reused} computed"
    lines = [f"== {experiment.name}: {total} assets materialised in {seconds:.1f} s ({work})"]
    lines.append(f"   outputs under {store.root}")
    lines += _funnels(experiment, get)
    lines += planted_items(experiment, get)
    for cache in of("tokenized_cache"):
        meta = get(cache).metadata
        lines.append(
            f"tokens ({cache.name}): {meta['train_tokens']:,} train / {meta['validation_tokens']:,} "
            f"validation, vocabulary {meta['vocab_size']:,}"
        )
    for evaluation in of("eval_results"):
        run_step = evaluation.inputs["checkpoint"]
        ckpt, evals = get(run_step).metadata, get(evaluation).metadata
        lines.append(run_line(run_step.name, ckpt, evals))
        tasks = [f"{k} {v:.3f}" for k, v in evals["scores"].items() if not k.startswith(("bpb/", "loss/"))]
        if tasks:
            lines.append(f"  tasks: {', '.join(tasks)}")
    for law_step in of("isoflop_law"):
        lines += _isoflop(get(law_step).metadata, get(law_step.inputs["isoflop_forecast"]).metadata)
    for board in of("speedrun_leaderboard"):
        if runs := get(board).metadata["runs"]:
            lines.append(f"speedrun: {runs} runs, `marin-pipelines leaderboard` prints the table")
    for comparison in of("comparison"):
        meta = get(comparison).metadata
        lines.append(f"comparison ({comparison.name}), best on {meta['metric']}: {meta['best']}")
        lines.append(f"  hypothesis: {meta['markdown']['hypothesis']}")
        lines += [f"  {line}" for line in meta["markdown"]["verdict"].replace("**", "").splitlines() if line]
        lines += [f"  {row}" for row in meta["markdown"]["comparison"].splitlines()]
    failed = run.failed_checks
    not_passed = f", {len(failed)} did not pass (listed with their reasons at the end)" if failed else ""
    lines.append(f"asset checks: {len(run.checks) - len(failed)} passed{not_passed}")
    return "\n".join(lines)


UI = "http://127.0.0.1:3000"  # where `make ui` serves Dagster's UI


@dataclass
class Outcome:
    """One experiment as the wrap-up tells it: what ran, the one figure it is about and where to look."""

    name: str
    computed: int
    reused: int
    figure: str  # its forecast against the actual, or its comparison's verdict; "" when it has neither
    page: str  # the asset whose page shows it, e.g. "demo/isoflop_law"


def outcome(experiment: Experiment, store_root: str, run: ExperimentRun) -> Outcome:
    """What the wrap-up says of ``experiment``, from its run and the headline its last declared IsoFLOP law
    (else its last comparison) stored: the figure that step's page shows first."""
    figure, page = "", experiment.steps[-1].name
    for stage, entry in HEADLINES.items():
        if steps := [s for s in experiment.steps if s.stage.name == stage]:
            artifact = ArtifactStore(store_root).get(steps[-1].key, steps[-1].version)
            text = artifact and artifact.metadata.get("markdown", {}).get(entry)  # older outputs may lack it
            if text:
                figure, page = text.split("\n\n")[0].replace("**", ""), steps[-1].name
            break
    return Outcome(experiment.name, len(run.materialized) - run.reused, run.reused, figure, page)


HEADLINES = {"isoflop_law": "forecast", "comparison": "verdict"}  # stage -> its headline's markdown entry


def wrap_up(outcomes: list[Outcome], checks: list[CheckOutcome], leaderboard: str = "") -> str:
    """The lines a run of experiments ends with: per experiment what ran, its figure and its page in the
    UI, then every check that did not pass, once (experiments sharing a step report its checks each), on
    one line with its reason."""
    lines = ["== wrap-up"]
    for o in outcomes:
        lines.append(f"{o.name} ({o.computed} outputs computed, {o.reused} reused): {o.figure or 'done'}")
        lines.append(f"  {UI}/assets/{o.page}")
    if leaderboard:
        lines.append(leaderboard)
    said: set[str] = set()
    for c in checks:
        if not c.passed and str(c) not in said:
            said.add(str(c))
            lines.append(f"{'FAILED' if c.blocking else 'WARNING'}: {c}: {c.reason or 'did not pass'}")
    return "\n".join(lines)


def run_line(name: str, trained: dict, evaluated: dict) -> str:
    """One run and its evaluation. Params are counted non-embedding, as the recipes, ladders, forecasts and
    comparisons count them; the total with embeddings (the trainer's ``params``) beside it, labelled."""
    return (
        f"{name}: {trained['non_embedding_params']:,} params non-embedding ({trained['params']:,} with "
        f"embeddings), {trained['tokens_seen']:,} tokens, train loss {trained['initial_loss']:.3f} -> "
        f"{trained['final_loss']:.3f}; validation loss {evaluated['loss']:.3f}, bits-per-byte "
        f"{evaluated['bits_per_byte']:.3f}"
    )


def _funnels(experiment: Experiment, get) -> list[str]:
    steps = [s for s in experiment.all_steps if s.stage.documents]
    if not steps:
        return []
    lines = ["documents per step (in -> kept; removed by reason):"]
    for step in steps:
        partitions = step.snapshots if step.partitioning == "snapshot" else [None]
        funnel = sum((Funnel.from_dict(get(step, p).metadata["funnel"]) for p in partitions), Funnel())
        by_family: Counter[str] = Counter()  # "gopher_repetition:dup_5_gram" counts under gopher_repetition
        for reason, n in funnel.removed.items():
            by_family[reason.split(":")[0]] += n
        reasons = ", ".join(f"{family} {n}" for family, n in by_family.most_common())
        lines.append(f"  {step.name:<34} {funnel.docs_in:>6} -> {funnel.docs_out:>6}   {reasons or '-'}")
    return lines


def planted_items(experiment: Experiment, get) -> list[str]:
    """What became of the evaluation items a ``dataset_dumps`` step planted, so that what was planted
    reconciles with what was found: each document holding one is followed through the document steps
    downstream of the dump, and its item was found (a decontamination step matched it), or the document was
    removed by another step first (a filter, dedup: the item never reached the decontamination), or kept."""
    lines: list[str] = []
    for dumps in (s for s in experiment.all_steps if s.stage.name == "dataset_dumps"):
        planted = get(dumps).metadata.get("planted") or []
        if not planted:
            continue
        first = _first_removals(experiment, dumps, {row["id"] for row in planted}, get)
        outcomes: Counter[str] = Counter()
        detail = []
        for row in planted:
            step, reason, items = first.get(row["id"], ("", "", []))
            if row.get("item") in items:
                outcome, kind = f"found by {step}", "found"
            else:
                outcome = kind = f"removed by {step} ({reason})" if step else "kept: not found"
            outcomes[kind] += 1
            detail.append(f"  {row.get('item')} (planted in {row['id']}): {outcome}")
        found = outcomes.pop("found", 0)
        rest = "".join(f"; {kind}: {n}" for kind, n in sorted(outcomes.items()))
        lines += [f"planted by {dumps.name}: {len(planted)}; found {found}{rest}", *detail]
    return lines


def _first_removals(
    experiment: Experiment, dumps: Step, ids: set[str], get
) -> dict[str, tuple[str, str, list[str]]]:
    """For each planted document: the first step downstream of ``dumps`` that removed it (a decontamination
    step with action mark: that marked it), why, and the items a decontamination step matched in it."""
    first: dict[str, tuple[str, str, list[str]]] = {}
    for step in experiment.all_steps:
        if not step.stage.documents or not any(up is dumps for up in step.upstream()[:-1]):
            continue
        decontamination = getattr(step.config, "decontamination", None)
        for partition in step.snapshots if step.partitioning == "snapshot" else [None]:
            url = get(step, partition).url
            rows = [row for shard in list_shards(url, REMOVED_PREFIX) for row in read_shard(shard)]
            if decontamination is not None and decontamination.action == "mark":
                columns = ["id", "matched_items"]
                marked = (row for shard in list_shards(url) for row in read_shard(shard, columns))
                rows += [{**row, "reason": "marked"} for row in marked if row["matched_items"]]
            for row in rows:
                if row["id"] in ids:
                    first.setdefault(row["id"], (step.name, row["reason"], row.get("matched_items") or []))
    return first


def forecast_order(result: dict) -> str:
    """Whether an IsoFLOP law's forecast was written before its target started, in words."""
    if result["preregistered"]:
        return "before it ran"
    return f"AFTER it started at {result['target_started_at']} (a target reused: no preregistration)"


def trust(result: dict, low: float, high: float) -> str:
    """The 95% interval's reach below and above the forecast, and what each source adds to it."""
    predicted, sources = result["predicted"], result["sources"]["95"]
    parts = ", ".join(f"{name} -{100 * down:.1f}%/+{100 * up:.1f}%" for name, (down, up) in sources.items())
    return f"95% reaches {100 * (low / predicted - 1):+.1f}% / {100 * (high / predicted - 1):+.1f}% ({parts})"


def _isoflop(law: dict, forecast: dict) -> list[str]:
    target, result = forecast["target"], law["result"]
    (low_80, high_80), (low, high) = result["interval_80"], result["interval_95"]
    predicted = f"{result['predicted']:.3f}, 80% [{low_80:.3f}, {high_80:.3f}], 95% [{low:.3f}, {high:.3f}]"
    if max(result["sources"]["95"]["noise"]) < 1e-9:  # each used budget's parabola runs through all its runs
        predicted += " (no noise measured: sweep more than 3 sizes, or 2 seeds)"
    lines = [
        f"IsoFLOP ladder: {forecast['n_runs']} runs, {forecast['n_budgets']} budgets used; "
        f"frontier {forecast['frontier']}",
        *(f"  {row}" for row in forecast["markdown"]["optima"].splitlines()),
        f"target run ({target['shape']} by the recipe, {target['flops']:.2g} FLOPs, "
        f"{forecast['extrapolation']:.3g}x the ladder's top budget), forecast at "
        f"{forecast['preregistered_at']} {forecast_order(result)}: loss {predicted}",
        f"  how far to trust it, said before the run: {trust(result, low, high)}",
        f"  how it fared: actual {result['actual']:.3f} ({100 * result['error']:+.1f}%), {result['fell']}",
    ]
    for metric, d in law["downstream"].items():
        error = "" if d["relative_error"] is None else f" ({100 * d['relative_error']:+.1f}%)"
        lines.append(f"  {metric}: forecast {d['predicted']:.3f}, actual {d['actual']:.3f}{error}")
    return lines  # the ladder's warnings: its check's reason, in the wrap-up
