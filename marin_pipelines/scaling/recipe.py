"""Scaling recipes: a compute budget in, one complete and valid run (model shape + TrainConfig) out.

A ladder that predicts a big run must train every rung by one rule, and the rule must say what the big run
will be before it starts; so the rule is code, and its constants are a frozen config that versions the step
that names it. Two recipes are registered in ``RECIPES``:

- ``constant``: today's ladder rule (``LadderConfig.run``): named sizes, one batch, one LR.
- ``delphi``: a rule in the style of Marin's Delphi scaling suite, sized for CPU ladders (budgets
  1e10-1e14 FLOPs, vocab 2k-8k, seq_len 128-512):

  * tokens = ``tokens_per_param`` x non-embedding params, 20 by default (Chinchilla, Hoffmann et al. 2022;
    non-embedding N as Kaplan et al. 2020 count it, like ``fit_scaling_law``), or a given param count for
    an IsoFLOP point; either way the tokens are ``budget / flops_per_token`` of the model itself;
  * shape: ``head_dim`` fixed, ``d_model`` a multiple of it, ``n_layers = d_model / aspect_ratio``
    (rounded, at least ``min_layers``), SwiGLU ``d_ff`` = 8/3 d_model up to a multiple of ``ffn_multiple``
    (Llama), multi-head attention (Delphi: no GQA);
  * batch: the power of two of sequences nearest ``target_steps`` steps (Delphi holds the step count);
  * peak LR = ``learning_rate`` x (``reference_d_model`` / d_model)^``width_exponent`` (muP for Adam:
    LR ~ 1/width) x sqrt(batch tokens / ``reference_batch_tokens``) (LR ~ sqrt(batch) for Adam, Malladi
    et al. 2022) x (``reference_tokens`` / tokens)^``horizon_exponent`` (Delphi's token-horizon
    correction: longer runs want smaller peaks), capped at ``max_learning_rate``;
  * beta2 with a fixed EMA half-life in tokens, ``batch_tokens x ln 0.5 / ln beta2 = half_life_tokens``,
    clipped to [``min_beta2``, ``max_beta2``] (Delphi; Porian et al. 2024 and Marek et al. 2025: small
    batches need a larger beta2);
  * WSD schedule, 10% warmup, 20% linear decay to 0 (Delphi), AdamW (``optimizer``: or adamh, muon);
  * dense, or with ``moe`` a mixture of experts on every shape: N is then the active non-embedding params
    (a token's top_k experts), so the rule sizes an MoE by the compute a token costs, as dense.

  With ``optimizer="muon"`` the same rule sets the one learning rate and weight decay, for Muon's hidden
  matrices and for the AdamW that keeps the embedding, LM head and norms. It carries over because each Muon
  update is scaled to RMS 0.2, AdamW's typical update RMS (Moonlight, Liu et al. 2025; train/optimizer.py):
  per entry, a Muon step at a given LR is the size of an AdamW step, so Moonlight reused AdamW's tuned LR
  and decay unchanged. What differs is the exponents, argued for Adam. Muon's update is full rank, its
  spectral norm 0.2 x lr x sqrt(width), where Adam's (near low rank, entries ~lr) grows like lr x width,
  so muP's spectral condition would give the hidden matrices LR ~ 1/sqrt(width) (``width_exponent``
  0.5), not 1/width; with one LR for both parts the Adam exponent stays, conservative for Muon at large
  widths. The sqrt-batch rule (an SDE argument for Adam) is unmeasured for Muon, and beta2 reaches only
  the Adam part (Muon's momentum is fixed at 0.95): a Muon ladder should search ``width_exponent`` and
  ``learning_rate`` before it extrapolates.

A recipe whose rule (code) changes should be registered under a new name: only constants are fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from marin_pipelines.scaling.scaling_law import LadderConfig, LadderRun
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig, preset
from marin_pipelines.train.moe import MoEConfig
from marin_pipelines.train.train_config import TrainConfig

Optimizer = Literal["adamw", "adamh", "muon"]  # TrainConfig.optimizer
DEFAULT_TOKENS_PER_PARAM = 20.0  # Chinchilla
SHAPE_TOLERANCE = 2.0  # a request further than this factor past the recipe's smallest/largest shape fails


class RecipeRun(LadderRun):
    """A ``LadderRun`` (so ladders plan, name and train it as any rung) plus what the recipe decided.

    ``tokens`` are the ones trained (steps x batch x seq_len); ``tokens_per_param`` is over non-embedding
    params. ``optimizer`` is the recipe's choice (``train.optimizer``).
    """

    recipe: str
    tokens: int
    tokens_per_param: float
    optimizer: Optimizer = "adamw"

    @property
    def budget(self) -> float:
        return self.budget_flops

    @property
    def params(self) -> int:
        """Non-embedding parameters, the N of the scaling fits: active ones (an MoE's top_k experts)."""
        return self.model.num_params(include_embeddings=False, active=True)

    @property
    def flops(self) -> float:
        """Training FLOPs actually spent: the model's own FLOPs per token x the tokens trained."""
        return self.model.flops_per_token() * self.tokens

    def describe(self) -> dict[str, Any]:
        """Flat, JSON-ready metadata: what a run page or a ladder table shows."""
        m, t = self.model, self.train
        return {
            "name": self.name,
            "recipe": self.recipe,
            "budget": self.budget_flops,
            "flops": self.flops,
            "params": self.params,
            "total_params": m.num_params(),
            "active_params": m.num_params(active=True),
            "tokens": self.tokens,
            "tokens_per_param": self.tokens_per_param,
            **m.model_dump(include={"d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"}),
            **t.model_dump(
                include={"steps", "batch_size", "learning_rate", "lr_schedule", "warmup_steps"}
                | {"decay_fraction", "min_lr_ratio", "weight_decay", "beta1", "beta2"}
            ),
            "optimizer": self.optimizer,
        }


def _check_request(budget: float, params: float | None, tokens_per_param: float | None) -> float | None:
    """Validates the request; returns the ratio to aim for (None: a param count was given)."""
    if not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"budget must be positive and finite, got {budget}")
    if params is not None and tokens_per_param is not None:
        raise ValueError("give params (an IsoFLOP point) or tokens_per_param, not both")
    if params is not None:
        if not params > 0:
            raise ValueError(f"params must be positive, got {params}")
        return None
    ratio = DEFAULT_TOKENS_PER_PARAM if tokens_per_param is None else tokens_per_param
    if not ratio > 0:
        raise ValueError(f"tokens_per_param must be positive, got {ratio}")
    return ratio


def _size_key(model: LlamaConfig, by_ratio: bool) -> float:
    """What a request pins, growing with the shape: non-embedding (active) params N; or, aiming at r tokens
    per param, N x flops_per_token, which equals budget / r exactly when the budget buys r x N tokens."""
    n = model.num_params(include_embeddings=False, active=True)
    return n * model.flops_per_token() if by_ratio else n


def _nearest(
    name: str, shapes: Sequence[LlamaConfig], budget: float, params: float | None, ratio: float | None
) -> LlamaConfig:
    """The shape nearest (in log) to the requested params, or to ``ratio`` tokens per param at this budget.

    Between two shapes the request gets the nearer (shapes are discrete; an IsoFLOP profile is flat near
    its optimum). Past the smallest or largest shape by more than ``SHAPE_TOLERANCE`` it is an error,
    not a silently different run."""
    target = budget / ratio if ratio is not None else float(params or 0)  # params > 0: _check_request
    keys = [_size_key(m, ratio is not None) for m in shapes]
    best = min(range(len(shapes)), key=lambda i: abs(math.log(keys[i] / target)))  # ties: the smaller
    if target * SHAPE_TOLERANCE >= min(keys) and target <= max(keys) * SHAPE_TOLERANCE:
        return shapes[best]
    model = shapes[best]
    n = model.num_params(include_embeddings=False, active=True)
    if ratio is None:
        ask, got = f"{params:.3g} params", f"{n} params"
    else:
        ask = f"{ratio:g} tokens/param at budget {budget:.3g} FLOPs"
        got = f"{budget / model.flops_per_token() / n:.3g} tokens/param"
    raise ValueError(
        f"recipe {name!r} has no shape near {ask}: its nearest, d_model {model.d_model} x {model.n_layers} "
        f"layers, gives {got}; change the budget, tokens_per_param or params"
    )


def _train_config(base: TrainConfig | None, optimizer: Optimizer, **fields: Any) -> TrainConfig:
    """``base`` (seed, logging, checkpointing...) with the recipe's fields."""
    return TrainConfig(**{**(base or TrainConfig()).model_dump(), **fields, "optimizer": optimizer})


class DelphiRecipe(BaseModel):
    """The Delphi-style rule (module docstring). Defaults: the CPU ladders' scale; the LR reference is the
    ``constant`` rule's measured best (3e-3 for d_model 64 at 16 x 128-token batches, ~2^18 tokens)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["delphi"] = Field(
        default="delphi", description="recipe name, the discriminator of a recipe field: delphi"
    )
    # Shape. head_dim 16 as in the presets up to d_model 128 (nano, micro, tiny): at 1e11 FLOPs and a 4k
    # vocab the LM head alone costs 6 x 4096 x d_model FLOPs a token, so 20 tokens/param needs d_model ~16.
    head_dim: int = Field(default=16, gt=0, multiple_of=2, description="d_model / n_heads, even for RoPE")
    aspect_ratio: float = Field(default=32.0, gt=0, description="d_model / n_layers (presets mini..150m)")
    min_layers: int = Field(
        default=2,
        gt=0,
        description="fewest layers of a shape (n_layers = d_model / aspect_ratio, at least this)",
    )
    max_d_model: int = Field(default=4096, gt=0, description="largest width searched")
    kv_group: int = Field(
        default=1,
        gt=0,
        description="query heads per KV head where it divides n_heads (else 1). 1, as Delphi: no GQA, whose "
        "saving (the KV cache) is nothing at these sizes, and params then grow strictly with width",
    )
    ffn_ratio: float = Field(default=8 / 3, gt=0, description="SwiGLU d_ff / d_model (Llama)")
    ffn_multiple: int = Field(
        default=32, gt=0, description="d_ff is rounded up to a multiple of this (Llama)"
    )
    qk_norm: bool = Field(
        default=False, description="RMSNorm on each head's queries and keys, in every shape"
    )
    moe: MoEConfig | None = Field(
        default=None,
        description="mixture-of-experts MLPs on every shape (experts of the shape's d_ff unless moe.d_ff); "
        "params and FLOPs count active parameters, so the rule sizes an MoE by what a token computes",
    )
    # Batch and steps.
    target_steps: int = Field(
        default=256,
        gt=0,
        description="batch: the power of two nearest this many steps. Past the critical batch a token is "
        "worth less: on CPU ladders at 2e11-1.6e12 FLOPs 256 steps gave batches 4-8x the best measured "
        "(README, 'Why 2048 steps'), and scaling_forecast holds 2048",
    )
    min_batch_size: int = Field(default=4, gt=0, description="fewest sequences per step the batch rule gives")
    max_batch_size: int = Field(
        default=1024, gt=0, description="most sequences per step the batch rule gives"
    )
    min_steps: int = Field(default=20, gt=0, description="fewer: the budget is too small for the recipe")
    # Learning rate.
    learning_rate: float = Field(default=3e-3, gt=0, description="peak LR at the reference point")
    reference_d_model: int = Field(
        default=64,
        gt=0,
        description="width at which the peak LR is learning_rate (reference of the width scaling)",
    )
    reference_batch_tokens: int = Field(
        default=16 * 128,
        gt=0,
        description="tokens per step at which the peak LR is learning_rate (reference of the batch scaling)",
    )
    reference_tokens: float = Field(default=2.0**18, gt=0, description="T0 of the token-horizon correction")
    width_exponent: float = Field(default=1.0, ge=0, description="LR ~ (reference_d_model / d_model)^this")
    batch_exponent: float = Field(default=0.5, ge=0, description="LR ~ (batch tokens / reference)^this")
    horizon_exponent: float = Field(default=0.3, ge=0, description="LR ~ (T0 / T)^this (Delphi)")
    max_learning_rate: float = Field(default=2e-2, gt=0, description="cap on the scaled peak LR")
    # Adam.
    optimizer: Optimizer = Field(
        default="adamw", description="optimizer of the runs (TrainConfig.optimizer): adamw, adamh or muon"
    )
    beta1: float = Field(default=0.9, ge=0, lt=1, description="Adam's beta1 of every run")
    half_life_tokens: float = Field(default=2.0**19, gt=0, description="beta2's EMA half-life in tokens")
    min_beta2: float = Field(
        default=0.9, gt=0, lt=1, description="lower clip of beta2 from the half-life rule"
    )
    max_beta2: float = Field(
        default=0.9999, gt=0, lt=1, description="upper clip of beta2 from the half-life rule"
    )
    weight_decay: float = Field(
        default=0.1, ge=0, description="weight decay of every run (TrainConfig.weight_decay)"
    )
    # Schedule: WSD.
    warmup_fraction: float = Field(
        default=0.1, ge=0, lt=0.5, description="WSD: share of steps spent warming up"
    )
    decay_fraction: float = Field(
        default=0.2, gt=0, le=0.5, description="WSD: share of steps spent decaying linearly"
    )
    min_lr_ratio: float = Field(
        default=0.0, ge=0, le=1, description="LR at the end of the decay, as a fraction of the peak"
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> DelphiRecipe:
        if self.min_batch_size > self.max_batch_size:
            raise ValueError(
                f"min_batch_size ({self.min_batch_size}) > max_batch_size ({self.max_batch_size})"
            )
        if self.min_beta2 > self.max_beta2:
            raise ValueError(f"min_beta2 ({self.min_beta2}) > max_beta2 ({self.max_beta2})")
        return self

    def shape(self, d_model: int, vocab_size: int, seq_len: int) -> LlamaConfig:
        """The model of width ``d_model`` (a multiple of head_dim): depth, heads and d_ff follow from it."""
        if d_model % self.head_dim:
            raise ValueError(f"d_model ({d_model}) must be a multiple of head_dim ({self.head_dim})")
        n_heads = d_model // self.head_dim
        return LlamaConfig(
            vocab_size=vocab_size,
            seq_len=seq_len,
            d_model=d_model,
            n_layers=max(self.min_layers, math.floor(d_model / self.aspect_ratio + 0.5)),
            n_heads=n_heads,
            n_kv_heads=n_heads // self.kv_group if n_heads % self.kv_group == 0 else n_heads,
            d_ff=math.ceil(self.ffn_ratio * d_model / self.ffn_multiple) * self.ffn_multiple,
            qk_norm=self.qk_norm,
            moe=self.moe,
        )

    def shapes(self, vocab_size: int, seq_len: int) -> list[LlamaConfig]:
        """Every shape the recipe can build, smallest first (params and FLOPs grow with width)."""
        widths = range(self.head_dim, self.max_d_model + 1, self.head_dim)
        return [self.shape(d, vocab_size, seq_len) for d in widths]

    def batch_size(self, tokens: float, seq_len: int) -> int:
        """Sequences per step: the power of two nearest ``target_steps`` steps, within the bounds."""
        exact = tokens / (seq_len * self.target_steps)
        power = 2 ** round(math.log2(exact)) if exact > 0 else 1
        return min(self.max_batch_size, max(self.min_batch_size, power))

    def peak_learning_rate(self, d_model: int, batch_tokens: int, tokens: float) -> float:
        """Width (muP), batch (sqrt) and token-horizon (Delphi) scaling of the reference LR, capped."""
        lr = (
            self.learning_rate
            * (self.reference_d_model / d_model) ** self.width_exponent
            * (batch_tokens / self.reference_batch_tokens) ** self.batch_exponent
            * (self.reference_tokens / tokens) ** self.horizon_exponent
        )
        return min(self.max_learning_rate, lr)

    def beta2(self, batch_tokens: int) -> float:
        """beta2 = 0.5^(batch_tokens / half_life): the second moment forgets half in ``half_life_tokens``."""
        return min(self.max_beta2, max(self.min_beta2, 0.5 ** (batch_tokens / self.half_life_tokens)))

    def run(
        self,
        budget: float,
        vocab_size: int,
        seq_len: int,
        *,
        params: float | None = None,
        tokens_per_param: float | None = None,
        base: TrainConfig | None = None,
    ) -> RecipeRun:
        """The run for ``budget`` FLOPs: at ``params`` non-embedding params (an IsoFLOP point), else at
        ``tokens_per_param`` (default 20). Fields of ``base`` the recipe does not set (seed, logging...)
        are kept."""
        ratio = _check_request(budget, params, tokens_per_param)
        model = _nearest(self.name, self.shapes(vocab_size, seq_len), budget, params, ratio)
        flops_per_token = model.flops_per_token()
        batch = self.batch_size(budget / flops_per_token, seq_len)
        steps = round(budget / flops_per_token / (batch * seq_len))
        if steps < self.min_steps:
            need = self.min_steps * self.min_batch_size * seq_len * flops_per_token
            raise ValueError(
                f"budget {budget:.3g} FLOPs is {steps} steps of {batch} x {seq_len} tokens for d_model "
                f"{model.d_model} x {model.n_layers} layers; recipe {self.name!r} needs at least "
                f"{self.min_steps} steps, a budget of at least {need:.3g} FLOPs"
            )
        tokens = steps * batch * seq_len
        train = _train_config(
            base,
            self.optimizer,
            steps=steps,
            batch_size=batch,
            learning_rate=self.peak_learning_rate(model.d_model, batch * seq_len, tokens),
            lr_schedule="wsd",
            warmup_steps=round(self.warmup_fraction * steps),
            decay_fraction=self.decay_fraction,
            min_lr_ratio=self.min_lr_ratio,
            weight_decay=self.weight_decay,
            beta1=self.beta1,
            beta2=self.beta2(batch * seq_len),
        )
        return RecipeRun(
            size=f"d{model.d_model}l{model.n_layers}",
            budget_flops=budget,
            model=model,
            train=train,
            recipe=self.name,
            tokens=tokens,
            tokens_per_param=tokens / model.num_params(include_embeddings=False, active=True),
            optimizer=self.optimizer,
        )


_LADDER = LadderConfig.model_fields


class ConstantRecipe(BaseModel):
    """Today's ladder rule, ``LadderConfig.run``, as a recipe: the named size nearest the request, one
    batch size, one LR (or LR ~ 1/width), warmup a fraction of the steps, everything else from ``base``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["constant"] = Field(
        default="constant", description="recipe name, the discriminator of a recipe field: constant"
    )
    sizes: list[str] = Field(default=list(MODEL_SIZES), min_length=1, description="named sizes to pick from")
    batch_size: int = Field(
        default=_LADDER["batch_size"].default,
        gt=0,
        description="sequences per step of every run (LadderConfig.batch_size)",
    )
    learning_rate: float = Field(
        default=_LADDER["learning_rate"].default,
        gt=0,
        description="peak LR (at reference_d_model under inverse_width)",
    )
    lr_rule: Literal["constant", "inverse_width"] = Field(
        default=_LADDER["lr_rule"].default,
        description="constant: learning_rate at every size; inverse_width: LR x reference_d_model / d_model",
    )
    reference_d_model: int = Field(
        default=_LADDER["reference_d_model"].default,
        gt=0,
        description="width at which inverse_width gives learning_rate",
    )
    warmup_fraction: float = Field(
        default=_LADDER["warmup_fraction"].default, ge=0, lt=1, description="share of steps spent warming up"
    )

    def ladder(self, size: str, budget: float) -> LadderConfig:
        """The one-rung ladder whose ``run`` this recipe is."""
        rule = self.model_dump(include={"batch_size", "learning_rate", "lr_rule"} | {"reference_d_model"})
        return LadderConfig(sizes=[size], budgets=[budget], warmup_fraction=self.warmup_fraction, **rule)

    def run(
        self,
        budget: float,
        vocab_size: int,
        seq_len: int,
        *,
        params: float | None = None,
        tokens_per_param: float | None = None,
        base: TrainConfig | None = None,
    ) -> RecipeRun:
        """``LadderConfig.run`` for the named size nearest ``params`` (or ``tokens_per_param``: 20)."""
        ratio = _check_request(budget, params, tokens_per_param)
        models = {size: preset(size, vocab_size, seq_len) for size in self.sizes}
        model = _nearest(self.name, list(models.values()), budget, params, ratio)
        size = next(s for s, m in models.items() if m is model)
        rung = self.ladder(size, budget).run(size, budget, vocab_size, seq_len, base)
        tokens = rung.train.steps * rung.train.batch_size * seq_len
        return RecipeRun(
            **dict(rung),
            recipe=self.name,
            tokens=tokens,
            tokens_per_param=tokens / model.num_params(include_embeddings=False, active=True),
            optimizer=rung.train.optimizer,
        )


Recipe = DelphiRecipe | ConstantRecipe
"""A scaling recipe: ``name``, and ``run(budget, vocab_size, seq_len, *, params=None, tokens_per_param=None,
base=None) -> RecipeRun``, a complete run for a budget (at an IsoFLOP point's params, or a ratio)."""

AnyRecipe = Annotated[Recipe, Field(discriminator="name")]
"""A config field that names a recipe and overrides its constants: ``{"name": "delphi", "head_dim": 32}``."""

RECIPES: dict[str, Recipe] = {r.name: r for r in (ConstantRecipe(), DelphiRecipe())}


def recipe(name: str, **overrides: Any) -> Recipe:
    """The registered recipe ``name``, with constants overridden (validated: an unknown one is an error)."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known recipes: {sorted(RECIPES)}")
    default = RECIPES[name]
    return type(default).model_validate({**default.model_dump(), **overrides})
