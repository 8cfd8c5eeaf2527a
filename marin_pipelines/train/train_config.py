"""What a training run is configured with, and the files its directory holds: plain pydantic, no JAX, so
that run configs, the scaling recipe and comparisons can use it without loading an accelerator runtime."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

CHECKPOINTS_DIR = "checkpoints"  # orbax steps (train/checkpoint.py)
MODEL_FILE = "model.json"
TRAIN_FILE = "train.json"  # config + summary
METRICS_FILE = "metrics.jsonl"  # one line per step
LOSS_CURVE_FILE = "loss_curve.png"
STARTED_FILE = "started.json"  # when the run first started, kept across resumes: what a forecast precedes
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # a fine-tuned run's chat template (export-hf ships it)
# the record of a run imported from Hugging Face (import_hf), not trained: in train.json's summary and in
# its checkpoint's configs
IMPORTED = "imported"
# Where a run computes, not what it computes: a checkpoint resumes on another mesh, device count or process
# count, with or without FSDP, and ``peak_flops`` only changes the MFU. Marked so, a field is left out of a
# step's version (steps.versioned_config): the same run on another layout is the same output.
LAYOUT = {"unversioned": True}


class MeshConfig(BaseModel):
    """``train.mesh``: how the devices split the model; the ``data`` axis takes the devices that remain
    (train/sharding.py has the rules)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: int = Field(
        default=1,
        ge=1,
        description="tensor parallelism (Megatron): devices that split each layer's attention heads and MLP "
        "hidden width (d_ff), the batch replicated over them",
    )
    expert: int = Field(
        default=1,
        ge=1,
        description="expert parallelism (GShard): devices that split each MoE layer's experts, each also "
        "taking its share of the batch; 1 for a dense model",
    )


class TrainConfig(BaseModel):
    """Optimisation, bad-update skipping, checkpointing and parallelism of one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=300, gt=0, description="optimizer steps of the run")
    batch_size: int = Field(default=16, gt=0, description="sequences per step")
    learning_rate: float = Field(default=3e-3, gt=0, description="peak learning rate, reached after warmup")
    lr_schedule: Literal["cosine", "wsd"] = Field(
        default="cosine",
        description="cosine: decays from the end of warmup; wsd: holds the peak, then decays linearly over "
        "decay_fraction",
    )
    warmup_steps: int = Field(
        default=30, ge=0, description="steps of linear warmup to the peak, at most steps"
    )
    decay_fraction: float = Field(default=0.2, gt=0, le=1, description="wsd: share of steps spent decaying")
    min_lr_ratio: float = Field(
        default=0.1, ge=0, le=1, description="learning rate at the last step, as a fraction of the peak"
    )
    optimizer: Literal["adamw", "adamh", "muon"] = Field(
        default="adamw",
        description="adamw: Adam with decoupled weight decay; adamh: Adam with every weight matrix held on "
        "the sphere of its initial norm (train/optimizer.py), learning_rate then a relative step per update "
        "and weight_decay unused; muon: Muon (momentum 0.95, orthogonalized) on the hidden weight matrices "
        "of the blocks, adamw on the embedding, LM head and norm scales, each Muon update scaled to RMS 0.2 "
        "(Moonlight) so learning_rate and weight_decay mean what they do under adamw",
    )
    weight_decay: float = Field(
        default=0.1,
        ge=0,
        description="adamw; muon (its Muon matrices and AdamW kernels); adamh: unused, its norms are fixed",
    )
    adam_learning_rate: float = Field(
        default=6e-4,
        gt=0,
        description="adamh only: peak learning rate of plain Adam on the leaves off the spheres (the norm "
        "scales; not the MoE balance bias, which has no gradient), on learning_rate's warmup and decay; "
        "Levanter's adam_lr and default. On this project's small models 6e-4 barely moves the norm scales "
        "in a few hundred steps (optimizer_ablation's AdamH arm reached 6.90 with it; it uses 0.3, swept): "
        "sweep it for a small run",
    )
    beta1: float = Field(default=0.9, ge=0, lt=1, description="Adam's first-moment decay")
    beta2: float = Field(default=0.95, ge=0, lt=1, description="Adam's second-moment decay")
    grad_clip: float = Field(
        default=1.0, gt=0, description="largest global gradient norm; larger gradients are scaled down to it"
    )
    z_loss_weight: float = Field(default=0.0, ge=0, description="weight of mean logsumexp(logits)^2 (PaLM)")
    spike_window: int = Field(default=64, ge=0, description="losses in the spike window; 0: no spike skips")
    spike_sigma: float = Field(default=6.0, gt=0, description="skip when loss > window mean + sigma x std")
    max_consecutive_skips: int = Field(default=10, gt=0, description="stop the run after this many in a row")
    seed: int = Field(
        default=0, description="seed of the parameter initialisation and of the run's random key"
    )
    log_every: int = Field(
        default=10,
        gt=0,
        description="steps between progress-bar and log lines (metrics.jsonl has every step)",
    )
    checkpoint_every: int = Field(default=100, gt=0, description="steps between (asynchronous) checkpoints")
    keep_last: int = Field(default=2, gt=0, description="most recent checkpoints kept")
    keep_every: int | None = Field(default=None, gt=0, description="also keep every checkpoint at k x this")
    fsdp: bool = Field(
        default=True,
        description="shard parameters and optimiser state over the mesh's data axis too",
        json_schema_extra=LAYOUT,
    )
    mesh: MeshConfig = Field(
        default=MeshConfig(), description="device mesh: data x expert x model", json_schema_extra=LAYOUT
    )
    peak_flops: float | None = Field(
        default=None,
        gt=0,
        description="peak FLOP/s of one device in the run's compute dtype (model.dtype); the MFU denominator "
        "is it x the mesh's devices. None: measure model.dtype matmuls on every device of the mesh at once",
        json_schema_extra=LAYOUT,
    )
    max_epochs: float | None = Field(
        default=None,
        gt=0,
        description="refuse a run that would read any data source's training split more than this many "
        "times (a ladder rung that repeats its text learns little that extrapolates); None: no limit",
    )

    @model_serializer(mode="wrap")
    def _unused_default_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``adam_learning_rate`` is left out of the dump where it is unused (not adamh) and at its default,
        so that adding it left the version of every other run (steps.versioned_config hashes this dump) as
        it was; the dump still validates back to the same config."""
        dumped = handler(self)
        default = type(self).model_fields["adam_learning_rate"].default
        if self.optimizer != "adamh" and self.adam_learning_rate == default:
            dumped.pop("adam_learning_rate", None)
        return dumped

    @model_validator(mode="after")
    def _check_warmup(self) -> TrainConfig:
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must not exceed steps ({self.steps})")
        return self


LAYOUT_FIELDS = frozenset(
    name for name, field in TrainConfig.model_fields.items() if field.json_schema_extra == LAYOUT
)
