"""The comparison step of a controlled ablation: several trained and evaluated variants side by side.

A researcher deciding whether z-loss or a quality filter helped should read one page, not assemble a
WandB report. It opens with the answer: whether the hypothesis held (held, did not hold, or cannot tell,
with the figures), judged on its claims (``Claim``: a variant better than, the same as or worse than
another on the metrics the hypothesis is about) within a tolerance: the one the hypothesis states, else
the spread the runs' seeds measured, else the band of a seed noise measured elsewhere (``SeedNoise``: the
project's is ``MEASURED_SEED_NOISE``), said where it came from, else none, and then nothing is judged the
same and the verdict cannot tell. Then each judged pair on each metric, the hypothesis, a markdown table
(the best of the arms that spent the same FLOPs in bold), the training loss curves overlaid, each variant's
loss minus its comparable baseline's, and the evaluation scores as bars. Everything is read from what the
training and evaluation steps already wrote, so this step needs no accelerator.

Parameter counts are non-embedding (N as Kaplan et al. and Chinchilla count it, as the project's recipes,
ladders and forecasts do; at these sizes a 2k-row embedding is most of the total and would hide the
layers' differences); the total with embeddings, what model cards report, has its own labelled row.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as config_dataclass

from marin_pipelines.scaling.seed_noise import SeedNoise
from marin_pipelines.store import read_url
from marin_pipelines.train.train_config import METRICS_FILE, TRAIN_FILE  # no JAX

COMPARISON_FILE = "comparison.json"
LOSS_CURVES_FILE = "loss_curves.png"
LOSS_DIFFERENCE_FILE = "loss_vs_baseline.png"
SCORES_FILE = "scores.png"
# each run's loss and bits-per-byte on the held-out part of the data it trained on: comparable only
# between variants that trained on the same data (the named sets below are comparable between all)
OWN_LOSS, OWN_BPB = "own-data validation loss", "own-data bits-per-byte"
OWN_FLOPS, ALL_FLOPS = "FLOPs, this run's own", "FLOPs with its warm-start base's"
NO_HYPOTHESIS = "(no hypothesis stated)"
DECLARED = "the tolerance declared for the hypothesis"
MISSING = "-"
# arms whose FLOPs (a warm start's base's included) agree within 5% spent one budget: a recipe rounds its
# steps and an MoE's router adds 0.1%, while the budgets one experiment compares differ 2x or more
SAME_BUDGET = 0.05
# a tolerance measured from seeds: 2 standard deviations of the difference of two single-seed runs
# (sqrt 2 x the seeds' relative spread each), about 95% of the differences that are noise alone
SEED_BANDS = 2.0

Number = int | float
Better = Literal["lower", "higher"] | None
Expect = Literal["better", "same", "worse", "not worse"]
Outcome = Literal["better", "same", "worse"]
Held = Literal["held", "did not hold", "cannot tell"]
EXPECTED: dict[str, str] = {
    "better": "better than",
    "same": "the same as",
    "worse": "worse than",
    "not worse": "no worse than",
}


@dataclass(frozen=True)
class Variant:
    """One arm of the ablation: what its training step wrote and what its evaluation step reported."""

    label: str
    checkpoint_dir: str | Path  # a local folder or a URL in the store
    evals: dict[str, Any]


@config_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Claim:
    """One clause of a hypothesis, as the verdict checks it: ``variant`` is ``expect`` (better than, the
    same as, worse than, not worse than) ``against`` on ``metrics`` (none named: every metric the
    comparison is about). ``Claim("continued_qk_norm", "same", "continued")``."""

    variant: str
    expect: Expect
    against: str
    metrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """One metric across the variants; ``better`` says which way wins (None: a quantity, not a score)."""

    metric: str
    better: Better
    values: dict[str, Number | None]

    def best(self, among: Sequence[str]) -> str | None:
        """The best of ``among``; non-finite values never win: a diverged run must not look best on its
        NaN."""
        finite = [label for label in among if _finite(self.values[label])]
        if self.better is None or not finite:
            return None
        pick = min if self.better == "lower" else max
        return pick(finite, key=lambda label: self.values[label])  # type: ignore[arg-type, return-value]


@dataclass(frozen=True)
class Tolerance:
    """The band, relative to the baseline's value, within which two values count as the same, and where
    it came from; ``relative`` None: there is none, and no difference can be judged."""

    relative: float | None
    source: str

    def describe(self) -> str:
        if self.relative is None:
            return f"no tolerance: {self.source}"
        return f"the same within {_percent(self.relative)}, {self.source}"


@dataclass(frozen=True)
class Difference:
    """``variant`` against ``against`` on one metric: both values and, within the tolerance, the outcome
    (None: a value is missing or not finite, or there is no tolerance to judge by)."""

    variant: str
    against: str
    value: Number | None
    base: Number | None
    outcome: Outcome | None

    @property
    def comparable(self) -> bool:
        return _finite(self.value) and _finite(self.base)

    @property
    def relative(self) -> float | None:
        if not self.comparable or not self.base:
            return None
        return (self.value - self.base) / abs(self.base)  # type: ignore[operator]

    def held(self, expect: Expect) -> Held:
        if self.outcome is None:
            return "cannot tell"
        if expect == "not worse":
            return "held" if self.outcome != "worse" else "did not hold"
        return "held" if self.outcome == expect else "did not hold"

    def figure(self) -> str:
        """``-7.8%``: the relative difference, else the absolute one, else why there is none."""
        if not self.comparable:
            return f"{_format(self.value, 'lower')} vs {_format(self.base, 'lower')}"
        relative = self.relative
        return f"{relative:+.1%}" if relative is not None else f"{self.value - self.base:+.4g}"  # type: ignore[operator]


def compare_variants(
    variants: list[Variant],
    hypothesis: str,
    out_dir: Path,
    metrics: Sequence[str] = (),
    claims: Sequence[Claim] = (),
    tolerance: float | None = None,
    seeds: Mapping[str, Sequence[str]] | None = None,
    noise: SeedNoise | None = None,
) -> dict[str, Any]:
    """Write ``comparison.json`` and the plots into ``out_dir``.

    ``metrics`` are the table's scores the hypothesis is about (the own-data validation loss when none is
    named); the first decides ``best``. ``claims`` are the hypothesis's clauses, checked in order; without
    them each variant is set against the first and nothing is checked. ``tolerance``: the relative band the
    hypothesis states ("within 1%": 0.01); without it, each metric's is measured from ``seeds`` (an arm ->
    the variants that are it with other seeds), where given; else the band of ``noise``, a seed noise
    measured elsewhere. Returns metadata for the asset's manifest, in
    the order a reader wants it: ``markdown`` (``verdict``, ``hypothesis``, ``comparison``), ``best``,
    ``metric``, ``held`` and ``plots``. ``comparison.json`` holds every number.
    """
    if len(variants) < 2:
        raise ValueError(f"a comparison needs at least two variants, got {len(variants)}")
    labels = [v.label for v in variants]
    check_plan(labels, hypothesis, metrics, claims, tolerance, seeds or {}, noise)
    seeds = {arm: list(others) for arm, others in (seeds or {}).items()}
    replicates = {label for others in seeds.values() for label in others}
    out_dir = Path(out_dir)
    curves = {v.label: _loss_curve(v) for v in variants}
    summaries = {v.label: _train_summary(v) for v in variants}
    rows = _rows(variants, summaries)
    by_metric = {row.metric: row for row in rows}
    asked = list(metrics) or [OWN_LOSS]
    if unknown := [m for m in asked if by_metric.get(m) is None or by_metric[m].better is None]:
        scores = [row.metric for row in rows if row.better is not None]
        raise ValueError(f"comparison metrics {unknown} are not scores of these variants; they have {scores}")
    arms = [label for label in labels if label not in replicates]
    pairs = judged_pairs(arms, claims)
    tolerances = {m: tolerance_of(by_metric[m], tolerance, seeds, noise) for m in asked}
    flops = by_metric[ALL_FLOPS if ALL_FLOPS in by_metric else OWN_FLOPS].values
    budgets = same_budgets(arms, flops)
    text, held = verdict(by_metric, asked, pairs, claims, tolerances)
    best = best_by_budget(by_metric[asked[0]], budgets, flops, tolerances[asked[0]])
    metadata: dict[str, Any] = {
        "markdown": {
            "verdict": text,
            "hypothesis": hypothesis.strip() or NO_HYPOTHESIS,
            "comparison": markdown_table(labels, rows, budgets),
        },
        "best": best_text(best, budgets, flops),
        "metric": asked[0],
        "held": held,
        "plots": {
            "loss_vs_baseline": LOSS_DIFFERENCE_FILE,
            "loss_curves": LOSS_CURVES_FILE,
            "scores": SCORES_FILE,
        },
    }
    budget_of = {label: i for i, group in enumerate(budgets) for label in group}
    drawn = [(a, b) for a, b in pairs if a in budget_of and budget_of[a] == budget_of.get(b)]
    record = {
        **metadata,
        "variants": labels,
        "pairs": [list(pair) for pair in pairs],
        "claims": [
            {**_claim_dict(c), "metric": m, "held": d.held(c.expect), "relative": d.relative}
            for c, m, d in checked_claims(by_metric, asked, claims, tolerances)
        ],
        "tolerances": {m: {"relative": t.relative, "source": t.source} for m, t in tolerances.items()},
        "budgets": [
            {"variants": group, "flops": flops[group[0]], **best.get(i, {})}
            for i, group in enumerate(budgets)
        ],
        "metrics": asked,
        "hypothesis": metadata["markdown"]["hypothesis"],
        "rows": [{"metric": r.metric, "better": r.better, "values": r.values} for r in rows],
        "loss_curves": curves,
    }
    (out_dir / COMPARISON_FILE).write_text(json.dumps(record, indent=2))
    plot_loss_curves(curves, out_dir / LOSS_CURVES_FILE)
    plot_loss_difference(curves, drawn, [p for p in pairs if p not in drawn], out_dir / LOSS_DIFFERENCE_FILE)
    plot_scores(labels, [r for r in rows if _is_score(r.metric)], out_dir / SCORES_FILE)
    return metadata


def check_plan(
    labels: Sequence[str],
    hypothesis: str,
    metrics: Sequence[str],
    claims: Sequence[Claim],
    tolerance: float | None,
    seeds: Mapping[str, Sequence[str]],
    noise: SeedNoise | None = None,
) -> None:
    """What a comparison is asked to judge, checked before anything is read: unique labels; claims between
    two different variants, on the metrics the comparison is about; each seed run of one arm; a tolerance
    that is the one the hypothesis states ("within 1%": 0.01), where it states one; and a seed noise
    measured elsewhere only where no tolerance is declared (it would never be used)."""
    if duplicates := sorted({label for label in labels if list(labels).count(label) > 1}):
        raise ValueError(f"variant labels must be unique; repeated: {duplicates}")
    asked = list(metrics) or [OWN_LOSS]
    for i, claim in enumerate(claims):
        if unknown := [label for label in (claim.variant, claim.against) if label not in labels]:
            raise ValueError(f"claims[{i}] names {unknown}, which are not variants ({list(labels)})")
        if claim.variant == claim.against:
            raise ValueError(f"claims[{i}] sets {claim.variant!r} against itself")
        if stray := [m for m in claim.metrics if m not in asked]:
            raise ValueError(
                f"claims[{i}] names metrics {stray}, which the comparison is not about ({asked})"
            )
    replicates = [label for others in seeds.values() for label in others]
    if unknown := sorted({*seeds, *replicates} - set(labels)):
        raise ValueError(f"seeds names {unknown}, which are not variants ({list(labels)})")
    if twice := sorted({x for x in replicates if replicates.count(x) > 1} | (set(seeds) & set(replicates))):
        raise ValueError(f"seeds: {twice} are named as the seeds of more than one arm")
    stated = stated_tolerances(hypothesis)
    if stated and not any(tolerance is not None and math.isclose(tolerance, t) for t in stated):
        said = ", ".join(f"within {100 * t:g}%" for t in stated)
        raise ValueError(
            f"tolerance is {tolerance}, but the hypothesis states {said}: declare tolerance={stated[0]:g}"
        )
    if tolerance is not None and noise is not None:
        raise ValueError(
            "declare a tolerance (the band the hypothesis states) or a seed noise measured elsewhere "
            "(for a hypothesis that states none), not both"
        )


def stated_tolerances(hypothesis: str) -> list[float]:
    """The bands a hypothesis states in words, as fractions: "within 1%" -> 0.01."""
    return [float(n) / 100 for n in re.findall(r"\bwithin (\d+(?:\.\d+)?) ?%", hypothesis)]


def judged_pairs(arms: list[str], claims: Sequence[Claim]) -> list[tuple[str, str]]:
    """The (variant, against) pairs the verdict sets side by side: each claim's, in the hypothesis's order;
    without claims, each arm against the first."""
    if claims:
        return list(dict.fromkeys((c.variant, c.against) for c in claims))
    return [(label, arms[0]) for label in arms[1:]]


def tolerance_of(
    row: Row,
    declared: float | None,
    seeds: Mapping[str, Sequence[str]],
    noise: SeedNoise | None = None,
) -> Tolerance:
    """The declared tolerance, else one measured from the seeds on this row, else the band of ``noise`` (a
    seed noise measured elsewhere, the same band as seeds measured here would give), else none (said so)."""
    if declared is not None:
        return Tolerance(declared, DECLARED)
    measured = seed_noise(row, seeds)
    if measured is not None:
        spread, runs = measured
        return Tolerance(
            SEED_BANDS * math.sqrt(2) * spread,
            f"measured: {SEED_BANDS:g} x sqrt 2 x the seeds' relative spread {spread:.2%} ({runs} runs)",
        )
    if noise is not None:
        return Tolerance(
            SEED_BANDS * math.sqrt(2) * noise.relative,
            f"no band stated and no seeds run: {SEED_BANDS:g} x sqrt 2 x a run's seed noise "
            f"{noise.relative:.2%}, {noise.source}",
        )
    return Tolerance(None, "none is declared and no seeds were run to measure the noise")


def seed_noise(row: Row, seeds: Mapping[str, Sequence[str]]) -> tuple[float, int] | None:
    """The pooled relative standard deviation of ``row`` between seeds of one arm (each value against its
    arm's mean), and the number of runs it rests on; None without two finite values of one arm."""
    squares, freedom, runs = 0.0, 0, 0
    for arm, others in seeds.items():
        values = [v for v in (row.values[label] for label in (arm, *others)) if _finite(v)]
        if len(values) < 2 or not (mean := float(np.mean(values))):
            continue
        squares += sum((v / mean - 1) ** 2 for v in values)  # type: ignore[operator]
        freedom, runs = freedom + len(values) - 1, runs + len(values)
    return (math.sqrt(squares / freedom), runs) if freedom else None


def difference(row: Row, variant: str, against: str, tolerance: Tolerance) -> Difference:
    """``variant`` against ``against`` on ``row``: better or worse beyond the tolerance, else the same."""
    value, base = row.values[variant], row.values[against]
    found = Difference(variant, against, value, base, None)
    if not found.comparable or tolerance.relative is None:
        return found
    step = value - base  # type: ignore[operator]
    if abs(step) <= tolerance.relative * abs(base):  # type: ignore[arg-type]
        return Difference(variant, against, value, base, "same")
    lower = step < 0
    return Difference(
        variant, against, value, base, "better" if lower == (row.better == "lower") else "worse"
    )


def checked_claims(
    by_metric: Mapping[str, Row],
    asked: list[str],
    claims: Sequence[Claim],
    tolerances: Mapping[str, Tolerance],
) -> list[tuple[Claim, str, Difference]]:
    """Each claim on each metric it is about, with what was measured."""
    return [
        (c, m, difference(by_metric[m], c.variant, c.against, tolerances[m]))
        for c in claims
        for m in c.metrics or asked
    ]


SAID = {"better": "better", "same": "the same", "worse": "worse", "not worse": "not worse"}
HEADS: dict[str, str] = {
    "held": "**The hypothesis held**",
    "did not hold": "**The hypothesis did not hold**",
    "cannot tell": "**Cannot tell whether the hypothesis held**",
}


def verdict(
    by_metric: Mapping[str, Row],
    asked: list[str],
    pairs: list[tuple[str, str]],
    claims: Sequence[Claim],
    tolerances: Mapping[str, Tolerance],
) -> tuple[str, Held]:
    """Markdown: first whether the hypothesis held (every claim held; one did not; or, none failing, one
    cannot be told, or there are no claims), each claim with its figure, and a tolerance the hypothesis
    does not state with where it came from; then, per metric, every judged
    pair within the metric's tolerance, and what each claim expected of it. Returns it and the answer."""
    checked = checked_claims(by_metric, asked, claims, tolerances)
    answers = [d.held(c.expect) for c, _, d in checked]
    held: Held = "held"
    if "did not hold" in answers:
        held = "did not hold"
    elif "cannot tell" in answers or not claims:
        held = "cannot tell"
    on = {m: f" on {m}" if len(asked) > 1 else "" for m in asked}
    clauses = [
        f"{c.variant} {EXPECTED[c.expect]} {c.against}{on[m]}: {d.figure()}, {d.held(c.expect)}"
        for c, m, d in checked
    ]
    head = f"{HEADS[held]}: " + (
        "; ".join(clauses) if claims else "the comparison declares no claims to check"
    )
    if untold := sorted({t.source for t in tolerances.values() if t.relative is None}):
        head += f" (no tolerance: {'; '.join(untold)})"
    # a band the hypothesis does not state is said, with where it came from, beside the answer it decided
    if unstated := list(
        dict.fromkeys(t.describe() for t in tolerances.values() if t.relative and t.source != DECLARED)
    ):
        head += f" ({'; '.join(unstated)})"
    blocks = [head]
    for metric in asked:
        row, tolerance = by_metric[metric], tolerances[metric]
        lines = [f"**{metric}** ({row.better} is better; {tolerance.describe()}):"]
        for variant, against in pairs:
            d = difference(row, variant, against, tolerance)
            expected = [
                f"expected {SAID[c.expect]}: {d.held(c.expect)}"
                for c in claims
                if (c.variant, c.against) == (variant, against) and metric in (c.metrics or asked)
            ]
            lines.append(f"- {variant} against {against}: " + "; ".join([_judged(d, row.better), *expected]))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks), held


def _judged(d: Difference, better: Better) -> str:
    """One pair's line: the outcome in bold, both values, the difference (absolute and relative)."""
    values = f"{_format(d.value, better)} vs {_format(d.base, better)}"
    if not d.comparable:
        return f"{values}, no verdict"
    step = d.value - d.base  # type: ignore[operator]
    relative = "" if d.relative is None else f" ({d.relative:+.1%})"
    outcome = f"**{SAID[d.outcome]}**" if d.outcome else ("lower" if step < 0 else "higher") + ", not judged"
    return f"{outcome}: {values}, {step:+.4g}{relative}"


def same_budgets(arms: list[str], flops: Mapping[str, Number | None]) -> list[list[str]]:
    """The arms grouped by the FLOPs they spent (within ``SAME_BUDGET``), cheapest first, each group in
    the variants' order; arms whose FLOPs are unknown are in none."""
    known = sorted((label for label in arms if _finite(flops[label])), key=lambda label: flops[label])  # type: ignore[arg-type, return-value]
    groups: list[list[str]] = []
    for label in known:
        if groups and flops[label] <= flops[groups[-1][0]] * (1 + SAME_BUDGET):  # type: ignore[operator]
            groups[-1].append(label)
        else:
            groups.append([label])
    return [sorted(group, key=arms.index) for group in groups]


def best_by_budget(
    row: Row, budgets: list[list[str]], flops: Mapping[str, Number | None], tolerance: Tolerance
) -> dict[int, dict[str, Any]]:
    """For each budget of two arms or more (by index), its best arm on ``row`` and the arms the same as it
    within the tolerance: a larger budget's run is never ranked against a smaller one's."""
    best = {}
    for i, group in enumerate(budgets):
        if len(group) < 2 or (winner := row.best(group)) is None:
            continue
        tied = [
            label
            for label in group
            if label != winner and difference(row, label, winner, tolerance).outcome == "same"
        ]
        best[i] = {"best": winner, "tied": tied}
    return best


def best_text(
    best: Mapping[int, dict[str, Any]], budgets: list[list[str]], flops: Mapping[str, Number | None]
) -> str:
    """``best`` in words: the arm alone where one budget holds every arm, else per budget, the arms alone at
    theirs said so; the arms the same as the best within the tolerance in parentheses."""
    if not best:
        return f"none: no two arms spent the same FLOPs (within {SAME_BUDGET:.0%})"
    parts = []
    for i, group in enumerate(budgets):
        at = "" if len(budgets) == 1 else f" at {flops[group[0]]:.2g} FLOPs"
        if i not in best:
            parts.append(f"{group[0]} alone{at}")
            continue
        tied = best[i]["tied"]
        parts.append(
            best[i]["best"] + at + (f" ({', '.join(tied)} the same within the tolerance)" if tied else "")
        )
    return "; ".join(parts)


def _claim_dict(claim: Claim) -> dict[str, Any]:
    return {"variant": claim.variant, "expect": claim.expect, "against": claim.against}


def _finite(value: Number | None) -> bool:
    return value is not None and math.isfinite(value)


def _percent(fraction: float) -> str:
    return f"±{100 * fraction:.3g}%"


def _read_text(path: str, variant: Variant) -> str:
    try:
        return read_url(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"variant {variant.label!r}: {path} not found (is it a training output?)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"variant {variant.label!r}: cannot read {path}: {e}") from e


def _loss_curve(variant: Variant) -> dict[str, list[Any]]:
    """Steps, losses and skipped steps as lists: what comparison.json keeps and the plot draws."""
    path = f"{variant.checkpoint_dir}/{METRICS_FILE}"
    curve: dict[str, list[Any]] = {"step": [], "loss": [], "skipped_steps": []}
    for number, line in enumerate(_read_text(path, variant).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, loss = int(record["step"]), float(record["loss"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"variant {variant.label!r}: line {number} of {path} is not a step record "
                f"with a step and a loss: {e}"
            ) from e
        curve["step"].append(step)
        curve["loss"].append(loss)
        if record.get("skipped"):
            curve["skipped_steps"].append(step)
    if not curve["step"]:
        raise ValueError(f"variant {variant.label!r}: {path} holds no steps")
    return curve


def _train_summary(variant: Variant, folder: str | Path | None = None) -> dict[str, Any]:
    """The training summary in ``folder`` (the variant's own by default; else a base it warm-started from)."""
    path = f"{variant.checkpoint_dir if folder is None else folder}/{TRAIN_FILE}"
    try:
        summary = json.loads(_read_text(path, variant))["summary"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"variant {variant.label!r}: {path} is not a training summary: {e!r}") from e
    if not isinstance(summary, dict):
        raise ValueError(f"variant {variant.label!r}: the summary in {path} is not a JSON object")
    return summary


def _base_flops(variant: Variant, summary: dict[str, Any]) -> Number | None:
    """The FLOPs of the runs ``variant`` sits on: its warm start's base's, and that base's base's, read from
    their own summaries (the folder each warm start recorded); 0 for a run from scratch, None where a base
    did not record its FLOPs."""
    total: Number = 0
    seen: set[str] = set()
    start = summary.get("warm_start")
    while isinstance(start, dict) and start.get("dir"):
        folder = str(start["dir"])
        if folder in seen:
            raise ValueError(f"variant {variant.label!r}: its warm starts lead back to {folder}")
        seen.add(folder)
        base = _train_summary(variant, folder)
        flops = _number(base.get("flops"), f"the FLOPs of its warm start's base {folder}", variant.label)
        if flops is None:
            return None
        total += flops
        start = base.get("warm_start")
    return total


def _non_embedding_active(summary: dict[str, Any]) -> Any:
    """The non-embedding params one token uses: the trainer's active count (embeddings included, as its
    ``params`` total) less the embeddings, which every token uses whole."""
    total, active, layers = (summary.get(k) for k in ("params", "active_params", "non_embedding_params"))
    if not all(isinstance(n, int) for n in (total, active, layers)):
        return None
    return active - (total - layers)  # type: ignore[operator]


def _number(value: Any, metric: str, variant: str) -> Number | None:
    """A missing metric is None (a "-" cell); one that is not a number is corrupt metadata, not a gap."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"variant {variant!r}: {metric} is {value!r}, not a number")
    return value


def _direction(score: str) -> Better:
    """bpb, chat losses and perplexities fall as a model improves; accuracies and exact matches rise."""
    metric = score.rsplit("/", 1)[-1]
    lower = score.startswith(("bpb/", "loss/", "chat/"))
    if lower or metric.endswith("perplexity") or metric == "bits_per_byte":
        return "lower"
    return "higher"


def _is_score(metric: str) -> bool:
    """The evaluation scores the bar chart shows: per-set bits per byte and lm-eval task metrics."""
    return "/" in metric


def _rows(variants: list[Variant], summaries: dict[str, dict[str, Any]]) -> list[Row]:
    def row(metric: str, better: Better, values: dict[str, Any]) -> Row:
        return Row(metric, better, {label: _number(v, metric, label) for label, v in values.items()})

    def from_evals(key: str) -> dict[str, Any]:
        return {v.label: v.evals.get(key) for v in variants}

    def from_summary(key: str) -> dict[str, Any]:
        return {label: summary.get(key) for label, summary in summaries.items()}

    scores = {v.label: v.evals.get("scores") or {} for v in variants}
    names = list(dict.fromkeys(name for s in scores.values() for name in s))  # first-seen order
    sets = [n for n in names if n.startswith("bpb/")]
    tasks = [n for n in names if not n.startswith(("bpb/", "loss/"))]  # loss/SET repeats bpb/SET
    own = row(OWN_FLOPS, None, from_summary("flops"))  # where its bases' are read too
    bases = {v.label: _base_flops(v, summaries[v.label]) for v in variants}
    continued = (
        [  # a warm start's FLOPs with its base's: what the continuation cost in all
            row(
                ALL_FLOPS,
                None,
                {k: None if v is None or bases[k] is None else v + bases[k] for k, v in own.values.items()},
            )
        ]
        if any(bases.values())
        else []
    )
    return [
        row("final training loss", "lower", from_summary("final_loss")),
        row(OWN_LOSS, "lower", from_evals("loss")),
        row(OWN_BPB, "lower", from_evals("bits_per_byte")),
        *(row(n, _direction(n), {label: s.get(n) for label, s in scores.items()}) for n in sets + tasks),
        row("params, non-embedding", None, from_summary("non_embedding_params")),
        row(
            "params, non-embedding, a token uses (MoE: active)",
            None,
            {label: _non_embedding_active(summary) for label, summary in summaries.items()},
        ),
        row("params, total with embeddings", None, from_summary("params")),
        row("training tokens", None, from_evals("train_tokens")),
        own,
        *continued,
        row("skipped updates", None, from_summary("skipped_updates")),
        row("train wall seconds", None, from_summary("wall_seconds")),
    ]


def _format(value: Number | None, better: Better) -> str:
    """Scores below 100 to four decimals, since ablations differ in the third; larger ones (perplexities)
    to four significant digits or whole; counts as counts."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return str(float(value))  # "nan", "inf", "-inf"
    if isinstance(value, int):
        return f"{value:,}"
    if not better:
        return f"{value:.4g}"
    return f"{value:.4f}" if abs(value) < 100 else f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def markdown_table(labels: list[str], rows: list[Row], budgets: list[list[str]]) -> str:
    """One row per metric, one column per variant; in bold the best value of each score among the arms
    that spent the same FLOPs (``same_budgets``), never against another budget's."""
    arrows = {"lower": " ↓", "higher": " ↑", None: ""}
    header = "| metric | " + " | ".join(label.replace("|", "\\|") for label in labels) + " |"
    lines = [header, "|---|" + "---:|" * len(labels)]
    ranked = [group for group in budgets if len(group) > 1]
    for row in rows:
        bold = set()
        for group in ranked:
            if (best := row.best(group)) is not None:
                bold |= {label for label in group if row.values[label] == row.values[best]}
        cells = [
            f"**{text}**" if label in bold else text
            for label, text in ((label, _format(row.values[label], row.better)) for label in labels)
        ]
        lines.append(f"| {row.metric}{arrows[row.better]} | " + " | ".join(cells) + " |")
    if ranked:
        lines += [
            "",
            f"Bold: the best of the arms that spent the same FLOPs (within {SAME_BUDGET:.0%}, a "
            "warm start's base's included).",
        ]
    return "\n".join(lines)


def plot_loss_curves(curves: dict[str, dict[str, list[Any]]], path: Path) -> None:
    """Against steps, not tokens: variants may differ in batch size, the table gives their tokens."""
    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    skipped: list[tuple[int, float]] = []
    for label, curve in curves.items():
        ax.plot(curve["step"], curve["loss"], linewidth=1, label=label)
        steps = set(curve["skipped_steps"])
        skipped += [(s, loss) for s, loss in zip(curve["step"], curve["loss"], strict=True) if s in steps]
    if skipped:
        ax.scatter([s for s, _ in skipped], [loss for _, loss in skipped], c="red", s=8, label="skipped")
    ax.legend()
    ax.set_xlabel("step (not tokens: batch sizes may differ)")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(f"training loss of {len(curves)} variants")
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def plot_loss_difference(
    curves: dict[str, dict[str, list[Any]]],
    pairs: list[tuple[str, str]],
    apart: list[tuple[str, str]],
    path: Path,
) -> None:
    """Each judged variant's training loss minus its baseline's (``pairs``: variant, baseline), at the
    steps both logged, averaged over a window of a tenth of the run: the differences an ablation is about,
    which the overlaid curves hide. Only pairs at the same FLOPs are drawn: a continuation's step 10 is not
    its base's; the others (``apart``) are named on the plot."""
    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    apart = list(apart)
    one = len({baseline for _, baseline in pairs}) == 1
    for i, (label, baseline) in enumerate(pairs, start=1):
        at = dict(zip(curves[baseline]["step"], curves[baseline]["loss"], strict=True))
        curve = curves[label]
        steps = [(s, loss - at[s]) for s, loss in zip(curve["step"], curve["loss"], strict=True) if s in at]
        if not steps:
            apart.append((label, baseline))  # no step in common: said on the plot, not left out silently
            continue
        window = max(1, len(steps) // 10)
        smooth = np.convolve([d for _, d in steps], np.ones(window) / window, mode="valid")
        name = label if one else f"{label} - {baseline}"
        ax.plot([s for s, _ in steps][window - 1 :], smooth, linewidth=1, color=f"C{i}", label=name)
    baseline = pairs[0][1] if one else "its baseline"
    ax.axhline(0, color="C0", linewidth=1, label=f"{baseline} (baseline)")
    if apart:
        names = ", ".join(f"{a} - {b}" for a, b in apart)
        said = textwrap.fill(f"not drawn (other FLOPs, or no step in common): {names}", 100)
        ax.text(0.01, 0.02, said, transform=ax.transAxes, fontsize=7, va="bottom")
    ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss minus {baseline}'s (nats/token)")
    ax.set_title("below 0: lower loss than the baseline at the same step")
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def plot_scores(labels: list[str], rows: list[Row], path: Path) -> None:
    """One panel per metric, one bar per variant: metrics differ in scale (perplexities in the hundreds,
    accuracies below one), so a shared axis would flatten most of them."""
    height = 0.3 * len(labels) + 0.6
    figure = Figure(figsize=(7, max(2.0, height * len(rows) + 0.8)), dpi=100)
    FigureCanvasAgg(figure)
    if not rows:
        figure.text(0.5, 0.5, "no bits-per-byte sets or task scores to compare", ha="center", va="center")
        figure.savefig(path)
        return
    axes = figure.subplots(len(rows), 1, squeeze=False)[:, 0]
    for ax, row in zip(axes, rows, strict=True):
        for i, label in enumerate(labels):
            value = row.values[label]
            drawn = value if value is not None and math.isfinite(value) else 0
            ax.barh(i, drawn, color=f"C{i}", label=label)
            ax.annotate(
                _format(value, row.better), (drawn, i), xytext=(3, 0), textcoords="offset points", va="center"
            )
        ax.set_yticks([])
        ax.invert_yaxis()
        ax.margins(x=0.2)
        ax.set_title(f"{row.metric} ({row.better} is better)", fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    figure.legend(*axes[0].get_legend_handles_labels(), loc="upper right", fontsize=8)
    figure.tight_layout(rect=(0, 0, 0.85, 1))
    figure.savefig(path)
