"""Helpers that declare the usual steps, so that an experiment file reads like a recipe (Marin's
``defaults.py``): crawl and text (or an existing corpus, or the installed packages' text), quality and
curation, tokenizer and cache, train, chat data and SFT, evaluate, an IsoFLOP ladder by a scaling recipe
with its preregistered forecast target, the speedrun, a comparison, ``variant`` for an ablation, and ``sweep``
over a training step's config, whose ``best`` a later ``train`` takes (``best_of=``).

Configs are given as dicts (or config objects); a bad field is an error naming the step, the place it
was declared and the field. Step names are ``{prefix}/{stage}`` unless a name is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from marin_pipelines.config_errors import describe
from marin_pipelines.evals.comparison import Claim
from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE
from marin_pipelines.scaling.isoflop_ladder import IsoflopLadderConfig
from marin_pipelines.scaling.seed_noise import SeedNoise
from marin_pipelines.stages import corpus as corpus_stages
from marin_pipelines.stages import crawl as crawl_stages
from marin_pipelines.stages import dataset_dumps as dumps_stages
from marin_pipelines.stages import decontamination as decontamination_stages
from marin_pipelines.stages import evals as eval_stages
from marin_pipelines.stages import package_text as package_text_stages
from marin_pipelines.stages import quality as quality_stages
from marin_pipelines.stages import scaling as scaling_stages
from marin_pipelines.stages import sft as sft_stages
from marin_pipelines.stages import sweep as sweep_stages
from marin_pipelines.stages import text as text_stages
from marin_pipelines.stages import tokenize as token_stages
from marin_pipelines.stages import train as train_stages
from marin_pipelines.steps import Stage, Step, StepError, changed_fields, declared_at

Fields = dict[str, Any] | BaseModel | None
STEP_HELPERS = True  # a step's declared_at() is the experiment's line that called these helpers


def step(
    name: str, stage: Stage, config: Fields, inputs: dict[str, Step | None], after: tuple[Step, ...] = ()
) -> Step:
    """A step of ``stage`` with ``config`` validated; inputs given as None are left out."""
    where = declared_at()
    return Step(
        name,
        stage,
        validated(stage.config, config, f"step {name!r} ({where})"),
        {key: value for key, value in inputs.items() if value is not None},
        after,
        where,
    )


def validated(cls: type[BaseModel], fields: Fields, where: str) -> Any:
    """``fields`` as a ``cls``, or an error naming each bad field and what is allowed."""
    if isinstance(fields, cls):
        return fields
    if isinstance(fields, BaseModel):
        fields = fields.model_dump()
    if fields is not None and not isinstance(fields, dict):
        raise StepError(
            f"{where}: config must be a dict of {cls.__name__} fields, not {type(fields).__name__}"
        )
    try:
        return cls(**(fields or {}))
    except ValidationError as e:
        raise StepError(f"{where}: {describe(e, cls)}") from None


def all_valid(prefix: str, configs: dict[str, tuple[Stage, Fields]]) -> None:
    """The configs of the steps one helper declares (by stage name), checked before any of them is made:
    every bad field of every step is reported at once, not only the first step's."""
    where = declared_at()
    problems = []
    for name, (stage, fields) in configs.items():
        try:
            validated(stage.config, fields, f"step {f'{prefix}/{name}'!r} ({where})")
        except StepError as e:
            problems.append(str(e))
    if problems:
        raise StepError("\n".join(problems))


@dataclass(frozen=True)
class TextSteps:
    crawl: Step
    web_documents: Step
    extracted_text: Step
    filtered_text: Step
    deduplicated_text: Step

    def __iter__(self):
        return iter(
            (self.crawl, self.web_documents, self.extracted_text, self.filtered_text, self.deduplicated_text)
        )


def crawl_and_text(
    prefix: str,
    *,
    warc_root: str | None = None,
    demo: Fields = None,
    web_documents: Fields = None,
    extract: Fields = None,
    filters: Fields = None,
    dedup: Fields = None,
) -> TextSteps:
    """WARC files (``warc_root``, or the embedded demo crawl) -> documents -> text -> filtered -> dedup,
    one partition per crawl snapshot."""
    crawl_config = {"warc_root": warc_root, **_fields(demo, "demo")}
    all_valid(
        prefix,
        {
            "crawl": (crawl_stages.crawl, crawl_config),
            **_text_configs(web_documents, extract, filters, dedup),
        },
    )
    crawl = step(f"{prefix}/crawl", crawl_stages.crawl, crawl_config, {})
    return _text_after(prefix, crawl, web_documents, extract, filters, dedup)


def listed_files_and_text(
    prefix: str,
    files: list[str],
    snapshot: str,
    *,
    web_documents: Fields = None,
    extract: Fields = None,
    filters: Fields = None,
    dedup: Fields = None,
) -> TextSteps:
    """The same chain over WARC files named one by one, as one snapshot."""
    all_valid(prefix, _text_configs(web_documents, extract, filters, dedup))
    crawl = step(
        f"{prefix}/crawl", crawl_stages.listed_warc_files, {"files": files, "snapshot": snapshot}, {}
    )
    return _text_after(prefix, crawl, web_documents, extract, filters, dedup)


def _text_configs(
    web_documents: Fields, extract: Fields, filters: Fields, dedup: Fields
) -> dict[str, tuple[Stage, Fields]]:
    return {
        "web_documents": (crawl_stages.web_documents, web_documents),
        "extracted_text": (text_stages.extracted_text, extract),
        "filtered_text": (text_stages.filtered_text, filters),
        "deduplicated_text": (text_stages.deduplicated_text, dedup),
    }


def _text_after(
    prefix: str, crawl: Step, web_documents: Fields, extract: Fields, filters: Fields, dedup: Fields
) -> TextSteps:
    documents = step(f"{prefix}/web_documents", crawl_stages.web_documents, web_documents, {"crawl": crawl})
    text = step(f"{prefix}/extracted_text", text_stages.extracted_text, extract, {"web_documents": documents})
    filtered, deduplicated = _filtered_and_deduplicated(prefix, text, filters, dedup)
    return TextSteps(crawl, documents, text, filtered, deduplicated)


def _filtered_and_deduplicated(
    prefix: str, text: Step, filters: Fields, dedup: Fields, against: Sequence[Step] = ()
) -> tuple[Step, Step]:
    """The heuristic filters over ``text`` (extracted text, or a corpus), then dedup, also against the
    ``against`` dedup steps (every snapshot of each)."""
    filtered = step(f"{prefix}/filtered_text", text_stages.filtered_text, filters, {"extracted_text": text})
    inputs = {"filtered_text": filtered, **_dedup_inputs(f"{prefix}/deduplicated_text", dedup, against)}
    deduplicated = step(f"{prefix}/deduplicated_text", text_stages.deduplicated_text, dedup, inputs)
    return filtered, deduplicated


def _dedup_inputs(name: str, dedup: Fields, against: Sequence[Step]) -> dict[str, Step]:
    """The inputs that make dedup step ``name`` remove what the ``against`` dedup steps already hold: their
    indexes must be built alike (the same dedup config), or the hashes would not compare."""
    own = validated(text_stages.deduplicated_text.config, dedup, f"step {name!r}")
    for other in against:
        if other.stage is not text_stages.deduplicated_text:
            raise StepError(f"step {name!r} ({declared_at()}): against {other.name}: not a dedup step")
        if other.config != own:
            raise StepError(
                f"step {name!r} ({declared_at()}): against {other.name}: its dedup config differs in "
                f"{changed_fields(own.model_dump(), other.config.model_dump())}; its index would not compare"
            )
    return {f"against_{i}": other for i, other in enumerate(against)}


def corpus(name: str, paths: Sequence[str] = (), *, files: Step | None = None, **fields: Any) -> Step:
    """Documents from existing datasets (``CorpusConfig`` fields: ``text_field``, ``id_field``,
    ``keep_fields``, ``globs``, ``limit``, ``sample``, ...): one snapshot, which the text stages take where
    they take a crawl's text (``filtered_text``'s ``extracted_text``, and on), as ``corpus_and_text`` does.
    The files are ``paths``, or the output of the step ``files`` (a dump it wrote)."""
    return step(name, corpus_stages.corpus, {"paths": list(paths), **fields}, {"files": files})


@dataclass(frozen=True)
class CorpusSteps:
    corpus: Step
    filtered_text: Step
    deduplicated_text: Step

    def __iter__(self):
        return iter((self.corpus, self.filtered_text, self.deduplicated_text))


# a corpus has no language id of extraction's (lang, lang_score): the language rule is off unless asked for
CORPUS_FILTERS = {"language": {"enabled": False}}


def corpus_and_text(
    prefix: str,
    paths: Sequence[str] = (),
    *,
    files: Step | None = None,
    corpus: Fields = None,
    filters: Fields = None,
    dedup: Fields = None,
    dedup_against: Sequence[Step] = (),
) -> CorpusSteps:
    """An existing dataset -> filtered -> dedup, as ``crawl_and_text`` does after extraction, so that
    ``quality_and_curation`` and the tokenizer take its ``deduplicated_text``. ``filters`` default to
    ``CORPUS_FILTERS``; a corpus that keeps ``lang`` and ``lang_score`` fields can turn the rule on.
    ``files``: a step whose output holds the files (``paths`` then empty). ``dedup_against``: other dedup
    steps (a crawl's, another corpus's) whose documents this one's dedup removes, exact and near copies."""
    filters = CORPUS_FILTERS if filters is None else filters
    documents = {"paths": list(paths), **(_fields(corpus) or {})}
    all_valid(
        prefix,
        {
            "corpus": (corpus_stages.corpus, documents),
            "filtered_text": (text_stages.filtered_text, filters),
            "deduplicated_text": (text_stages.deduplicated_text, dedup),
        },
    )
    documents_step = step(f"{prefix}/corpus", corpus_stages.corpus, documents, {"files": files})
    text = _filtered_and_deduplicated(prefix, documents_step, filters, dedup, dedup_against)
    return CorpusSteps(documents_step, *text)


@dataclass(frozen=True)
class QualitySteps:
    quality_scores: Step
    curated_text: Step
    quality_labels: Step | None = None


def quality_and_curation(
    prefix: str,
    deduplicated_text: Step,
    *,
    quality: Fields = None,
    curation: Fields = None,
    datashop: Fields = None,
    scores: Step | None = None,
) -> QualitySteps:
    """A fastText classifier scores every document (trained on reference texts vs the crawl, or on Datashop
    labels when ``datashop`` is given), and the best are kept. ``scores`` reuses another step's scores."""
    configs = {"curated_text": (quality_stages.curated_text, curation or {"top_fraction": 0.8})}
    if scores is None:
        configs["quality_scores"] = (quality_stages.quality_scores, quality)
    if datashop is not None:
        configs["quality_labels"] = (quality_stages.quality_labels, datashop)
    all_valid(prefix, configs)
    labels = None
    if datashop is not None:
        labels = step(
            f"{prefix}/quality_labels",
            quality_stages.quality_labels,
            datashop,
            {"deduplicated_text": deduplicated_text},
        )
    if scores is None:
        scores = step(
            f"{prefix}/quality_scores",
            quality_stages.quality_scores,
            quality,
            {"deduplicated_text": deduplicated_text, "quality_labels": labels},
        )
    curated = step(
        f"{prefix}/curated_text",
        quality_stages.curated_text,
        curation or {"top_fraction": 0.8},
        {"deduplicated_text": deduplicated_text, "quality_scores": scores},
    )
    return QualitySteps(scores, curated, labels)


@dataclass(frozen=True)
class TokenSteps:
    tokenizer: Step
    cache: Step


def tokenizer_and_cache(
    prefix: str, curated_text: Step, *, tokenizer: Fields | Step = None, cache: Fields = None
) -> TokenSteps:
    """BPE trained on the text (or an existing tokenizer step, shared), and the tokenized cache."""
    configs = {"tokenized_cache": (token_stages.tokenized_cache, cache)}
    if not isinstance(tokenizer, Step):
        configs["tokenizer"] = (token_stages.tokenizer, tokenizer)
    all_valid(prefix, configs)
    if not isinstance(tokenizer, Step):
        tokenizer = step(
            f"{prefix}/tokenizer", token_stages.tokenizer, tokenizer, {"curated_text": curated_text}
        )
    built = step(
        f"{prefix}/tokenized_cache",
        token_stages.tokenized_cache,
        cache,
        {"curated_text": curated_text, "tokenizer": tokenizer},
    )
    return TokenSteps(tokenizer, built)


def train(
    name: str,
    tokens: TokenSteps,
    *,
    model: Fields = None,
    train: Fields = None,
    data_mixture: Fields = None,
    best_of: Sweep | Step | None = None,
) -> Step:
    """A model trained on the tokens (a mixture source without ``cache`` is these tokens; one whose ``cache``
    is another experiment's ``TokenSteps`` or cache step trains on that, as an input of this step). With
    ``best_of`` (a ``sweep``, or its ``best``) it trains with the sweep's best parameters set over this
    config when it runs: the sweep is an input, its version in this step's."""
    _expect(tokens, TokenSteps, "tokens", name)
    mixture, caches = _cache_inputs(_fields(data_mixture))
    config = {"model": _fields(model), "train": _fields(train), "data_mixture": mixture}
    inputs = {"tokenized_cache": tokens.cache, **caches, "best_of": _sweep_step(best_of, name)}
    return step(name, train_stages.checkpoint, _drop_none(config), inputs)


@dataclass(frozen=True)
class Sweep:
    """A sweep step and the training step it sweeps. ``best`` is what a later training step takes
    (``train(..., best_of=sweep.best)``, or the ``Sweep`` itself): the sweep step, whose ``best.json`` it
    trains with."""

    step: Step
    base: Step

    @property
    def best(self) -> Step:
        return self.step


def sweep(
    name: str,
    *,
    base: Step,
    space: dict[str, Any],
    trials: int,
    sampler: str = "tpe",
    pruner: str = "hyperband",
    seed: int = 0,
    metric: str = "val_loss",
    report_every: int | None = None,
    **settings: Any,
) -> Sweep:
    """A sweep over the config of ``base`` (a training step): ``space`` maps its dotted run-config fields
    (``train.learning_rate``, ``model.size``) to ``{low, high, log, step, int, grid}`` or a list of choices,
    checked here; ``trials`` trials (complete, pruned or failed) drawn by ``sampler`` (tpe, random, grid),
    stopped early by ``pruner`` (hyperband, median, none) on ``metric``, reported every ``report_every``
    steps; ``settings``: ``SweepSettings``' others (``startup_trials``, ``validation_batches``). It trains
    on ``base``'s inputs, and its version hashes ``base``'s config, the space and the settings."""
    where = f"step {name!r} ({declared_at()})"
    _expect(base, Step, "base", name)
    if base.stage is not train_stages.checkpoint:
        raise StepError(
            f"{where}: base must be a training step (train, variant: a checkpoint), not {base.name} "
            f"(a {base.stage.name})"
        )
    if taken := sorted({"warm_start", "best_of"} & set(base.inputs)):
        raise StepError(
            f"{where}: base {base.name} takes {', '.join(taken)}; a sweep's trials train from scratch on the "
            "base's own config: sweep a training step without them"
        )
    chosen = {
        "sampler": sampler,
        "pruner": pruner,
        "seed": seed,
        "metric": metric,
        "report_every": report_every,
    }
    config = {"base": base.config, "space": space, "settings": {"trials": trials, **chosen, **settings}}
    return Sweep(step(name, sweep_stages.sweep, config, dict(base.inputs)), base)


def _sweep_step(best_of: Sweep | Step | None, name: str) -> Step | None:
    """The sweep step a training step takes its best config from."""
    if isinstance(best_of, Sweep):
        return best_of.step
    if best_of is None or (isinstance(best_of, Step) and best_of.stage is sweep_stages.sweep):
        return best_of
    raise StepError(
        f"step {name!r} ({declared_at()}): best_of must be a sweep (as sweep() returns, or its best), not "
        f"{getattr(best_of, 'name', type(best_of).__name__)}"
    )


def _cache_inputs(mixture: dict[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Step]]:
    """The mixture with each source whose ``cache`` is a step (or ``TokenSteps``) naming instead the step
    input ``cache_{source}`` that it becomes."""
    sources, inputs = {}, {}
    for name, source in ((mixture or {}).get("sources") or {}).items():
        cache = source.get("cache") if isinstance(source, dict) else None
        cache = cache.cache if isinstance(cache, TokenSteps) else cache
        if isinstance(cache, Step):
            inputs[f"cache_{name}"] = cache
            source = {**source, "cache": None, "input": f"cache_{name}"}
        sources[name] = source
    return ({**mixture, "sources": sources} if inputs and mixture else mixture), inputs


def chat_data(
    name: str, *, train: list[str] | None = None, heldout: list[str] | None = None, demo: Fields = None
) -> Step:
    """Chat conversations (JSON-lines files, paths or URLs) in the store for fine-tuning and its held-out
    comparison; with no ``train`` files, the demo's chat set (``demo``: its ``DemoChatConfig`` fields)."""
    config = {"train": train or [], "heldout": heldout or [], "demo": _fields(demo)}
    return step(name, sft_stages.chat_data, _drop_none(config), {})


def sft(name: str, base: Step, chat: Step, *, train: Fields = None, chat_template: str | None = None) -> Step:
    """``base`` (a training step) fine-tuned on ``chat`` (a ``chat_data`` step): assistant tokens only, a
    fresh optimiser and schedule (``train`` over the SFT defaults), compared with the base when it ends."""
    _expect(base, Step, "base", name)
    _expect(chat, Step, "chat", name)
    if base.stage is not train_stages.checkpoint or chat.stage is not sft_stages.chat_data:
        raise StepError(
            f"step {name!r} ({declared_at()}): base must be a training step and chat a chat_data step, not "
            f"{base.name} and {chat.name}"
        )
    defaults = sft_stages.SFTRunConfig().train.model_dump()
    config = {"train": {**defaults, **(_fields(train) or {})}, "chat_template": chat_template}
    return step(name, sft_stages.sft_checkpoint, _drop_none(config), {"checkpoint": base, "chat_data": chat})


def evaluate(
    name: str,
    checkpoint: Step,
    *,
    evals: Fields = None,
    batch_size: int = EVAL_BATCH_SIZE,
    also: dict[str, Step] | None = None,
    chat: dict[str, Step] | None = None,
) -> Step:
    """The checkpoint's loss and bits-per-byte on its training data's validation split, on the validation
    splits of ``also`` (caches every variant of an ablation is measured on) and held-out sets, lm-eval
    tasks, and the loss per assistant token on the held-out conversations of ``chat`` (``chat_data`` steps,
    by name). A fine-tuned checkpoint is measured on its base's training data."""
    _expect(checkpoint, Step, "checkpoint", name)
    pretrained = checkpoint.inputs.get("checkpoint", checkpoint)  # an SFT run's base
    if checkpoint.stage is sweep_stages.sweep:
        raise StepError(
            f"step {name!r} ({declared_at()}): {checkpoint.name} is a sweep, not a checkpoint: evaluate a "
            "run trained with its best (train(..., best_of=sweep))"
        )
    if "tokenized_cache" not in pretrained.inputs:
        raise StepError(
            f"step {name!r} ({declared_at()}): checkpoint must be a training step, not {checkpoint.name}"
        )
    for label, data in (chat or {}).items():
        if not (isinstance(data, Step) and data.stage is sft_stages.chat_data):
            raise StepError(f"step {name!r} ({declared_at()}): chat[{label!r}] must be a chat_data step")
    cache = pretrained.inputs["tokenized_cache"]
    stage = (
        eval_stages.ladder_eval_results if checkpoint.partitioning == "ladder" else eval_stages.eval_results
    )
    inputs = {
        "checkpoint": checkpoint,
        "tokenized_cache": cache,
        "tokenizer": cache.inputs["tokenizer"],
        **(also or {}),
        **{f"{eval_stages.CHAT_INPUT}{label}": data for label, data in (chat or {}).items()},
    }
    return step(name, stage, _drop_none({"evals": _fields(evals), "batch_size": batch_size}), inputs)


@dataclass(frozen=True)
class Target:
    """The forecast (written first), the run it forecasts, its evaluation, and the law checking the one
    against the other."""

    prediction: Step
    checkpoint: Step
    evaluation: Step
    scaling_law: Step


def dataset_dumps(name: str, **config: Any) -> Step:
    """Dumps of existing corpora made from installed text (``DumpsConfig``: standard modules' docstrings as
    parquet, distributions' documentation as gzipped JSON lines, evaluation items planted): files for a
    ``corpus`` step to read (``files=``), as if somebody had made the dataset."""
    return step(name, dumps_stages.dataset_dumps, config, {})


def package_text(name: str, **config: Any) -> Step:
    """The installed packages' source and documentation text (``PackageTextConfig`` fields): a corpus of
    tens of millions of tokens on every machine, for ladders that must not repeat their data."""
    return step(name, package_text_stages.package_text, config, {})


def decontaminate(
    name: str, text: Step, *, evaluations: Sequence[Step] = (), against: Sequence[str] = (), **config: Any
) -> Step:
    """``text``'s documents less those that share a long n-gram with evaluation data: the lm-eval tasks,
    held-out files and chat sets of ``evaluations`` (the experiment's evaluation steps), and ``against``
    (task names or YAMLs, .txt and .jsonl files). ``config``: ``DecontaminationConfig``'s fields."""
    entries = list(against)
    for evaluation in evaluations:
        if evaluation.stage not in (eval_stages.eval_results, eval_stages.ladder_eval_results):
            raise StepError(f"step {name!r} ({declared_at()}): evaluations must be evaluation steps")
        evals = evaluation.config.evals
        chats = [d.config.heldout for d in evaluation.inputs.values() if d.stage is sft_stages.chat_data]
        files = [p for paths in (*evals.heldout.values(), *evals.chat.values(), *chats) for p in paths]
        # held-out sets in other formats (parquet, folders) are not read as evaluation items
        entries += [
            *evals.tasks,
            *evals.include_paths,
            *(f for f in files if f.endswith(decontamination_stages.FILE_SUFFIXES)),
        ]
    return step(
        name,
        decontamination_stages.decontaminated_text,
        {"against": list(dict.fromkeys(entries)), "decontamination": config},
        {"text": text},
    )


@dataclass(frozen=True)
class IsoflopLadder:
    config: IsoflopLadderConfig
    checkpoints: Step
    evaluations: Step


def isoflop_ladder(
    prefix: str,
    tokens: TokenSteps,
    *,
    ladder: Fields,
    train: Fields = None,
    data_mixture: Fields = None,
    evals: Fields = None,
    also: dict[str, Step] | None = None,
    batch_size: int = EVAL_BATCH_SIZE,
) -> IsoflopLadder:
    """Per budget, the recipe's sweep of sizes around its compute-optimal one (with ``seeds`` seeds each),
    one partition per rung, and their evaluations (on ``also``'s validation splits too: downstream sets).
    A mixture source whose ``cache`` is another ``TokenSteps`` trains on it, as ``train`` does."""
    _expect(tokens, TokenSteps, "tokens", f"{prefix}/isoflop_checkpoint")
    mixture, caches = _cache_inputs(_fields(data_mixture))
    config = {"ladder": _fields(ladder), "train": _fields(train), "data_mixture": mixture}
    runs = step(
        f"{prefix}/isoflop_checkpoint",
        train_stages.isoflop_checkpoint,
        _drop_none(config),
        {"tokenized_cache": tokens.cache, **caches},
    )
    evaluations = evaluate(
        f"{prefix}/ladder_eval_results", runs, evals=evals, batch_size=batch_size, also=also
    )
    return IsoflopLadder(runs.config.ladder, runs, evaluations)


def forecast_target(
    prefix: str,
    ladder: IsoflopLadder,
    *,
    downstream: list[str] | None = None,
    evals: Fields = None,
    also: dict[str, Step] | None = None,
    batch_size: int = EVAL_BATCH_SIZE,
    accuracy_goal: float | None = None,
) -> Target:
    """The recipe's run at the ladder's ``target_budget``, its loss (and each ``downstream`` score, e.g.
    ``bpb/NAME`` of an ``also`` set) forecast from the ladder first: the checkpoint runs after the forecast
    (an edge in the graph), which never sees it. It trains as the rungs do (their ``train`` and mixture).
    The law checks that the actual lies in the preregistered interval, and within ``accuracy_goal`` (a
    relative error) where one is given; both warn."""
    where = f"step {prefix + '/checkpoint'!r} ({declared_at()})"
    _expect(ladder, IsoflopLadder, "ladder", f"{prefix}/checkpoint")
    if ladder.config.target_budget is None:
        raise StepError(f"{where}: the ladder has no target_budget to forecast a run for")
    sets = {*(also or {}), *ladder.checkpoints.config.data_mixture.sources}
    for metric in downstream or []:
        kind, _, name = metric.partition("/")
        if kind in ("bpb", "loss") and name not in sets:
            raise StepError(
                f"{where}: downstream {metric!r}: no set {name!r} is evaluated; sets: {sorted(sets)}"
            )
    runs = ladder.checkpoints
    run = {
        "model": {"seq_len": ladder.config.seq_len},
        "train": runs.config.train,
        "data_mixture": runs.config.data_mixture,
        "target": ladder.config.target(),
    }
    run_config = validated(train_stages.TrainRunConfig, run, where)
    config = {
        "target": run_config,
        "bootstrap": ladder.config.bootstrap,
        "seed": ladder.config.seed,
        "downstream": downstream or [],
    }
    prediction = step(
        f"{prefix}/isoflop_forecast",
        scaling_stages.isoflop_forecast,
        config,
        {"ladder_eval_results": ladder.evaluations, **runs.inputs},  # the caches: the ladder's diagnostics
    )
    # the target trains on all the rungs' inputs (the mixture's caches)
    checkpoint = step(f"{prefix}/checkpoint", train_stages.checkpoint, run_config, runs.inputs, (prediction,))
    evaluation = evaluate(f"{prefix}/eval_results", checkpoint, evals=evals, batch_size=batch_size, also=also)
    law = step(
        f"{prefix}/isoflop_law",
        scaling_stages.isoflop_law,
        {"accuracy_goal": accuracy_goal},
        {"isoflop_forecast": prediction, "checkpoint": checkpoint, "eval_results": evaluation},
    )
    return Target(prediction, checkpoint, evaluation, law)


def speedrun(
    name: str, tokens: TokenSteps, submissions: list[str], eval_batch_size: int = EVAL_BATCH_SIZE
) -> Step:
    """The chosen speedrun submissions, trained at their budgets on the tokens and ranked."""
    _expect(tokens, TokenSteps, "tokens", name)
    config = {"submissions": submissions, "eval_batch_size": eval_batch_size}
    return step(
        name,
        scaling_stages.speedrun_leaderboard,
        config,
        {"tokenized_cache": tokens.cache, "tokenizer": tokens.tokenizer},
    )


def compare(
    name: str,
    variants: dict[str, Step],
    hypothesis: str = "",
    metrics: Sequence[str] = (),
    claims: Sequence[Claim] = (),
    tolerance: float | None = None,
    seeds: dict[str, list[str]] | None = None,
    noise: SeedNoise | None = None,
) -> Step:
    """Evaluations side by side, with the checkpoints they evaluated; the comparison opens with whether the
    hypothesis held: each of its ``claims`` (``Claim("muon_8e11", "same", "adamw_8e11")``) on ``metrics``,
    the scores it is about, within ``tolerance`` (the relative band the hypothesis states: "within 1%" is
    0.01), else the noise measured between ``seeds`` (an arm -> its runs with other seeds), else the band of
    ``noise``, a seed noise measured elsewhere (``MEASURED_SEED_NOISE``, the project's), else none. With no
    claims, each variant is set against the first and the verdict cannot tell."""
    inputs: dict[str, Step | None] = {}
    for label, evaluation in variants.items():
        if "checkpoint" not in evaluation.inputs:
            raise StepError(f"{name}: variant {label!r} must be an evaluation step, not {evaluation.name}")
        inputs[f"{label}_eval"] = evaluation
        inputs[f"{label}_checkpoint"] = evaluation.inputs["checkpoint"]
    config = {
        "variants": list(variants),
        "hypothesis": hypothesis,
        "metrics": list(metrics),
        "claims": list(claims),
        "tolerance": tolerance,
        "seeds": dict(seeds or {}),
        "noise": noise,
    }
    return step(name, eval_stages.comparison, config, inputs)


def variant(of: Step, name: str, *, best_of: Sweep | Step | None = None, **changes: Any) -> Step:
    """``of`` with some config fields changed (nested dicts merge), under a new name, on the same inputs.

    The ablation's one line: ``variant(baseline, "zloss/run_1e_4", train={"z_loss_weight": 1e-4})``.
    Ordering-only edges are not carried over: the variant is not what a prediction was recorded for.
    ``best_of`` (a training step's variant): a sweep whose best parameters it trains with, as ``train``'s.
    """
    config = _merged(of.config_json, changes)
    caches: dict[str, Step] = {}
    if "data_mixture" in changes:  # a cooldown on another experiment's cache: one more input
        config["data_mixture"], caches = _cache_inputs(config["data_mixture"])
    if best_of is not None and of.stage is not train_stages.checkpoint:
        raise StepError(f"step {name!r} ({declared_at()}): best_of is for training steps, not {of.name}")
    best = {"best_of": _sweep_step(best_of, name)} if best_of is not None else {}
    return step(name, of.stage, config, {**of.inputs, **caches, **best})


def warm_started(base: Step, name: str, *, optimizer: bool = True, **changes: Any) -> Step:
    """``base``'s run continued as a new run from its final checkpoint, with ``changes`` (``variant``'s:
    a model with QK-norm or more experts, more steps): every parameter of the same name and shape is loaded
    and, with ``optimizer``, its optimiser state; the rest initialised; the learning rate re-warmed by the
    new run's schedule (train/warm_start.py)."""
    _expect(base, Step, "base", name)
    if base.stage is not train_stages.checkpoint:
        raise StepError(f"step {name!r} ({declared_at()}): base must be a training step, not {base.name}")
    continued = variant(base, name, **changes, warm_start_optimizer=optimizer)
    return step(name, continued.stage, continued.config_json, {**continued.inputs, "warm_start": base})


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _fields(value: Fields, key: str | None = None) -> Any:
    """A config given as a dict or a model, as plain fields (nested under ``key`` when given)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if key is None:
        return value
    return {key: value} if value is not None else {}


def _drop_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _expect(value: Any, kind: type, what: str, name: str) -> None:
    """An input of a helper that is not what it takes (a missing one is None): the error names the step."""
    if not isinstance(value, kind):
        raise StepError(
            f"step {name!r} ({declared_at()}): {what} must be a {kind.__name__} (as the helpers return), "
            f"not {type(value).__name__}"
        )
