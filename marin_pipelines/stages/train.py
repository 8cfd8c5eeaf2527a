"""Training: a model on a tokenized cache, and a scaling ladder's runs as partitions: (budget x size) for a
ladder of named sizes, (budget x size x seed) for an IsoFLOP ladder planned by a scaling recipe.

Each run goes through the launcher (a subprocess here, a pod on Kubernetes). The child trains in the
output's work folder, keyed by the step's version in the store: a retry, a preempted pod or a later
materialisation resumes from its last checkpoint there, and only a finished run becomes the output.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from marin_pipelines.scaling.isoflop_ladder import IsoflopLadderConfig, target_run
from marin_pipelines.steps import Check, InputError, Launcher, StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact, read_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig, preset
from marin_pipelines.train.moe import MoEConfig
from marin_pipelines.train.run_config import RunConfig
from marin_pipelines.train.train_config import LOSS_CURVE_FILE, TRAIN_FILE, TrainConfig


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    size: str = Field("micro", description="a name from MODEL_SIZES")
    seq_len: int = Field(128, ge=8, description="the model's sequence length, in tokens")
    qk_norm: bool = Field(False, description="RMSNorm on each head's queries and keys")
    moe: MoEConfig | None = Field(None, description="mixture-of-experts MLPs (train/moe.py); None: dense")

    @field_validator("size")
    @classmethod
    def _known_size(cls, size: str) -> str:
        if size not in MODEL_SIZES:
            raise ValueError(f"unknown model size {size!r}; choose one of {sorted(MODEL_SIZES)}")
        return size


class TrainRunConfig(BaseModel):
    """What a checkpoint versions: model, training and mixture, or a recipe's run for a target budget.

    With ``target`` (``IsoflopLadderConfig.target()``: the ladder's recipe and the budget, not its rungs)
    the recipe decides the shape and the training for ``target_budget`` FLOPs, and ``model`` is not used;
    seed, logging and the rest come from ``train``. Adding a rung to the ladder changes its forecast, never
    this run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelChoice = Field(ModelChoice(), description="the model by named size; unused with target")
    train: TrainConfig = Field(
        TrainConfig(),
        description="optimisation, checkpointing and the rest of the run; with target, what the recipe "
        "leaves (seed, logging...)",
    )
    data_mixture: MixtureConfig = Field(
        MixtureConfig(), description="token caches and their weights in every training batch, by stage"
    )
    target: dict[str, Any] | None = Field(
        None,
        description="an IsoFLOP ladder's target() (its recipe and target_budget): the recipe decides shape "
        "and training; None: model and train",
    )
    warm_start_optimizer: bool = Field(
        True,
        description="with a warm_start input (another checkpoint): load its optimiser state where it "
        "matches, else start the optimiser fresh; its parameters are loaded either way (train/warm_start.py)",
    )

    @field_validator("target")
    @classmethod
    def _a_ladders_target(cls, target: dict[str, Any] | None) -> dict[str, Any] | None:
        if target is not None and (missing := IsoflopLadderConfig.TARGET_FIELDS - set(target)):
            raise ValueError(
                f"target must be an IsoFLOP ladder's target() {sorted(IsoflopLadderConfig.TARGET_FIELDS)}"
                f"; it has no {sorted(missing)}"
            )
        return target

    @model_validator(mode="after")
    def _every_source_in_every_batch(self) -> TrainRunConfig:
        if self.target is None:  # a target's batch size comes from the ladder's rule, checked when it runs
            self.data_mixture.batch_counts(self.train.batch_size)
        return self

    def resolve(self, vocab_size: int) -> tuple[LlamaConfig, TrainConfig]:
        """The model and training of the run, for the cache's vocabulary."""
        size, seq_len = self.model.size, self.model.seq_len
        if self.target is None:
            shape = preset(size, vocab_size, seq_len).model_dump()
            return LlamaConfig(**{**shape, **self.model.model_dump(include={"qk_norm", "moe"})}), self.train
        if self.model.qk_norm or self.model.moe is not None:
            raise InputError("a target run's shape is its recipe's: set qk_norm and moe in target.recipe")
        run = target_run(self.target, self.train)
        check_vocabulary(vocab_size, run.model)
        return run.model, run.train

    def run_config(self, vocab_size: int | None = None, mixture: MixtureConfig | None = None) -> RunConfig:
        """The run as a run config (``marin-pipelines train``'s, a sweep's trials'): the model by its size,
        the data's vocabulary filled in when it trains (``model.size`` can be searched), or a target's shape
        by its recipe (checked against ``vocab_size`` when given); ``mixture`` (its inputs made URLs) for the
        step's own. Trained, it is the run that ``resolve`` gives."""
        if self.target is None:
            model: dict[str, Any] = {
                "size": self.model.size,
                "seq_len": self.model.seq_len,
                "qk_norm": self.model.qk_norm,
            }
            if self.model.moe is not None:
                model["moe"] = self.model.moe.model_dump()
            train = self.train
        elif vocab_size is None:
            recipe = target_run(self.target, self.train)
            model, train = recipe.model.model_dump(), recipe.train
        else:
            shape, train = self.resolve(vocab_size)
            model = shape.model_dump()
        return RunConfig(model=model, train=train, data=mixture or self.data_mixture)


class IsoflopRunsConfig(BaseModel):
    """An IsoFLOP ladder's rungs, each the recipe's run at one budget, size and seed, on one mixture."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ladder: IsoflopLadderConfig = Field(
        description="the recipe, budgets, sizes per budget and seeds per size whose runs are the rungs"
    )
    train: TrainConfig = Field(
        TrainConfig(), description="what the recipe leaves (logging, checkpoints, max_epochs); seeds per rung"
    )
    data_mixture: MixtureConfig = Field(
        MixtureConfig(), description="token caches and their weights in every training batch, by stage"
    )


def check_vocabulary(vocab_size: int, model: LlamaConfig) -> None:
    """A model planned before its tokenizer was trained holds every token id of it."""
    if vocab_size > model.vocab_size:
        raise InputError(
            f"the tokenizer has {vocab_size} tokens, more than the ladder's vocab_size {model.vocab_size}: "
            "set the ladder's vocab_size to the tokenizer's"
        )


def loss_finite_and_falling(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """The final training loss is a number and below the loss at the start."""
    first, last = artifact.metadata["initial_loss"], artifact.metadata["final_loss"]
    return math.isfinite(last) and last < first, {"initial_loss": first, "final_loss": last}


LOSS_CHECK = {"loss_finite_and_falling": Check(loss_finite_and_falling)}


def check_trainable(cache: Artifact, mixture: MixtureConfig, model: LlamaConfig, train: TrainConfig) -> None:
    """Before a run is launched: every source of its mixture is a token cache with at least one sequence
    of training tokens and gets rows of every batch of the stages that weigh it. Otherwise an error naming
    the source and the cache, here, rather than from inside the launched process."""
    try:
        mixture.batch_counts(train.batch_size)
    except ValueError as e:
        raise InputError(str(e)) from None
    need = model.seq_len + 1
    available = {}
    for name, source in mixture.sources.items():
        if source.input is not None:
            raise InputError(f"data_mixture source {name!r}: its input {source.input!r} is not a step input")
        if source.cache is None:
            url, tokens = cache.url, cache.metadata.get("train_tokens")
        else:
            url = source.cache
            try:
                tokens = len(TokenCache(url).train)
            except FileNotFoundError as e:
                raise InputError(f"data_mixture.sources.{name}.cache: {e}") from None
        if tokens is not None and tokens < need:
            raise InputError(
                f"data_mixture source {name!r}: the train split of {url} has {tokens} tokens, fewer than one "
                f"sequence of seq_len + 1 = {need}; lower the model's seq_len or give it more text"
            )
        available[name] = tokens
    if train.max_epochs is not None and None not in available.values():
        check_epochs(mixture, model, train, available)


def check_epochs(
    mixture: MixtureConfig, model: LlamaConfig, train: TrainConfig, available: dict[str, int]
) -> None:
    """Refuse a run that would read a source more than ``train.max_epochs`` times, saying how many training
    tokens that source would need."""
    epochs = mixture.epochs(train.batch_size, train.steps, model.seq_len, available)
    over = {name: e for name, e in epochs.items() if e > train.max_epochs}
    if over:
        needs = {name: math.ceil(available[name] * e / train.max_epochs) for name, e in over.items()}
        raise InputError(
            f"the run would read {', '.join(f'{n!r} {e:.2f} times' for n, e in over.items())}, more than "
            f"train.max_epochs = {train.max_epochs}: it needs {needs} training tokens (has "
            f"{ {n: available[n] for n in over} }); give it more text, or lower the budget"
        )


def launch_training(
    run_dir: str,
    cache: Artifact,
    launcher: Launcher,
    mixture: MixtureConfig,
    model: LlamaConfig,
    config: TrainConfig,
    **warm_start: Any,
) -> dict[str, Any]:
    """Train the run in ``run_dir`` (a path or URL) through the launcher (which resumes a run already begun
    there); its summary. ``warm_start``: ``TrainLaunch``'s warm-start fields."""
    run = RunConfig(model=model.model_dump(), train=config, data=mixture)
    launcher.train(TrainLaunch(run=run, data=cache.url, out=run_dir, **warm_start))
    return json.loads(read_url(f"{run_dir}/{TRAIN_FILE}"))["summary"]


def run_training(
    out: PendingArtifact,
    cache: Artifact,
    launcher: Launcher,
    mixture: MixtureConfig,
    model: LlamaConfig,
    config: TrainConfig,
    **warm_start: Any,
) -> None:
    """Train in the output's work folder, which becomes the output; the run's summary (with
    ``resumed_from_step``), where each source's tokens came from and the loss curve become its metadata."""
    out.metadata.update(launch_training(out.work, cache, launcher, mixture, model, config, **warm_start))
    out.keep_work()
    out.metadata["data_sources"] = mixture.cache_urls(cache.url)
    out.metadata["plots"] = {"loss_curve": LOSS_CURVE_FILE}


def mixture_of_inputs(ctx: StepContext, mixture: MixtureConfig, caches: dict[str, Artifact]) -> MixtureConfig:
    """The mixture with each source given as a step input made that input's cache URL."""
    try:
        return mixture.with_inputs({name: cache.url for name, cache in caches.items()})
    except ValueError as e:
        raise InputError(f"{ctx.step.name}: {e}") from None


# what a run is judged by, shown first and followed by its loss curve (``dagster_metadata``); params
# non-embedding first (the count the recipes, forecasts and comparisons use), then the trainer's ``params``
# and ``active_params``, which hold the embeddings (totals), each shown under a label saying so
RUN_HEADLINE = (
    "final_loss",
    "tokens_seen",
    "flops",
    "mfu",
    "non_embedding_params",
    "params",
    "active_params",
)
# the names a run's page shows its parameter counts under: the stored keys alone do not say which count
# holds the embeddings (the summary's keys stay, as other code reads them)
RUN_LABELS = {
    "non_embedding_params": "params, non-embedding",
    "params": "params, total with embeddings",
    "active_params": "params a token uses, total with embeddings (MoE: active)",
}


# revision 2: orbax
@stage(
    TrainRunConfig,
    revision=2,
    group="train",
    kinds=("jax",),
    checks=LOSS_CHECK,
    needs=("launcher",),
    headline=RUN_HEADLINE,
    labels=RUN_LABELS,
)
def checkpoint(
    ctx: StepContext,
    out: PendingArtifact,
    config: TrainRunConfig,
    tokenized_cache: Artifact,
    **caches: Artifact,
) -> None:
    """A Llama-style model trained with JAX / Flax NNX / Optax on the tokenized cache (and on the further
    caches its mixture names as inputs: another experiment's text to cool down on), dense or MoE; with a
    ``warm_start`` input (another checkpoint) it starts from that run's weights, across a model change; with
    a ``best_of`` input (a sweep) it trains with the sweep's best parameters over its own config."""
    base = caches.pop("warm_start", None)
    best = caches.pop("best_of", None)
    vocab_size = tokenized_cache.metadata["vocab_size"]
    model, train = config.resolve(vocab_size)
    mixture = mixture_of_inputs(ctx, config.data_mixture, caches)
    chosen = None
    if best is not None:
        model, train, mixture, chosen = with_best(ctx, config, vocab_size, mixture, best)
    check_trainable(tokenized_cache, mixture, model, train)
    warm = {"warm_start": base.url, "warm_start_optimizer": config.warm_start_optimizer} if base else {}
    run_training(out, tokenized_cache, ctx.launcher, mixture, model, train, **warm)
    if chosen is not None:
        out.metadata["best_of"] = chosen


BEST_FILE = "best.json"  # sweeps/sweep.py's: the best complete trial (params, value, trial, config, metric)


def with_best(
    ctx: StepContext, config: TrainRunConfig, vocab_size: int, mixture: MixtureConfig, sweep: Artifact
) -> tuple[LlamaConfig, TrainConfig, MixtureConfig, dict[str, Any]]:
    """The run of ``config`` with the best trial's parameters of the sweep ``sweep`` (its ``best.json``: the
    searched fields, dotted, set over this run's own config), and what was taken from it."""
    from marin_pipelines.sweeps.space import apply  # its imports are a sweep's, not every training step's

    name = sweep.manifest["asset"]
    if BEST_FILE not in {f["name"] for f in sweep.manifest["files"]}:
        raise InputError(
            f"{ctx.step.name}: the sweep {name} has no complete trial, so no best config to take"
        )
    best = json.loads(sweep.read_bytes(BEST_FILE))
    try:
        run = apply(
            config.run_config(vocab_size, mixture), best["params"], f"{ctx.step.name} with {name}'s best"
        )
    except ValueError as e:
        raise InputError(str(e)) from None
    chosen = {k: best[k] for k in ("trial", "value", "params", "metric")}
    return run.llama(vocab_size), run.train, run.data, {"sweep": name, **chosen}


_RUNG_KEYS: dict[str, list[str]] = {}  # config JSON -> rungs: planning takes 0.2 s, and it is asked often


def isoflop_partition_keys(config: IsoflopRunsConfig, strict: bool = False) -> list[str]:
    """One partition per rung, ``budget|size<rank>`` (a budget x size grid), planned once per config."""
    key = config.model_dump_json()
    if key not in _RUNG_KEYS:
        _RUNG_KEYS[key] = [rung.key for rung in config.ladder.plan(config.train).rungs]
    return list(_RUNG_KEYS[key])


@stage(
    IsoflopRunsConfig,
    group="scaling",
    kinds=("jax",),
    partitioning="ladder",
    checks=LOSS_CHECK,
    needs=("launcher",),
    partition_keys=isoflop_partition_keys,
    headline=RUN_HEADLINE,
    labels=RUN_LABELS,
)
def isoflop_checkpoint(
    ctx: StepContext,
    out: PendingArtifact,
    config: IsoflopRunsConfig,
    tokenized_cache: Artifact,
    **caches: Artifact,
) -> None:
    """One rung of an IsoFLOP ladder: the recipe's run at one budget, size and seed (on the further caches
    its mixture names as inputs too). The rungs are a budget x size grid: ``size1`` is the smallest model
    of its budget's sweep; its shape (``d48l2``: width 48, 2 layers) and seed are in its metadata."""
    rung = config.ladder.rung(str(out.partition), config.train)
    model, train = rung.run.model, rung.run.train
    check_vocabulary(tokenized_cache.metadata["vocab_size"], model)
    mixture = mixture_of_inputs(ctx, config.data_mixture, caches)
    check_trainable(tokenized_cache, mixture, model, train)
    run_training(out, tokenized_cache, ctx.launcher, mixture, model, train)
    out.metadata.update(
        budget_flops=rung.run.budget, shape=rung.run.size, seed=rung.seed, rung=rung.run.describe()
    )
