"""Post-training: chat data in the store, and supervised fine-tuning of a checkpoint on it.

``chat_data`` reads JSON-lines conversations (or builds the demo's chat set) into ``train.jsonl`` and
``heldout.jsonl``, skipping and counting lines that are not conversations. ``sft_checkpoint`` fine-tunes a
``checkpoint`` step's run through the launcher (``marin-pipelines sft`` in a subprocess or a pod, as training
runs), resuming in its work folder, and compares the base and the tuned model on the held-out chat data.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.evals.checkpoint_eval import heldout_fingerprint
from marin_pipelines.stages.train import LOSS_CHECK, RUN_HEADLINE, RUN_LABELS
from marin_pipelines.steps import InputError, StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact, read_url
from marin_pipelines.tokenize import demo_chat
from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatStats, read_conversations
from marin_pipelines.tokenize.demo_chat import DemoChatConfig, build_demo_chat
from marin_pipelines.train import sft as run_files
from marin_pipelines.train import train_config as train_files
from marin_pipelines.train.launch_config import SFTLaunch
from marin_pipelines.train.train_config import TrainConfig

TRAIN_CHATS, HELDOUT_CHATS = demo_chat.TRAIN_FILE, demo_chat.HELDOUT_FILE  # the files of any chat_data


class ChatDataConfig(BaseModel):
    """Chat files (paths or URLs, versioned by their content), or the demo's chat set when none are named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train: list[str] = Field(default_factory=list, description='JSON-lines files of {"messages": [...]}')
    heldout: list[str] = Field(default_factory=list, description="held-out conversations, same format")
    demo: DemoChatConfig = Field(DemoChatConfig(), description="the demo's set: used when train is empty")


def chat_files_content(config: ChatDataConfig) -> Any:
    """Named files version the step by content: a file edited in place is read again."""
    return heldout_fingerprint({"train": config.train, "heldout": config.heldout}) if config.train else None


@stage(ChatDataConfig, group="post_training", kinds=("json",), fingerprint=chat_files_content)
def chat_data(ctx: StepContext, out: PendingArtifact, config: ChatDataConfig) -> None:
    """Conversations for fine-tuning and its held-out comparison, one per line; bad lines skipped and
    counted by reason."""
    if not config.train:
        counts = build_demo_chat(out.path, config.demo)
        out.metadata.update(
            source="the demo's chat set", **{f"{k}_conversations": v for k, v in counts.items()}
        )
        return
    out.metadata["source"] = ", ".join(config.train)
    for split, files, name in (
        ("train", config.train, TRAIN_CHATS),
        ("heldout", config.heldout, HELDOUT_CHATS),
    ):
        stats = ChatStats()
        with (out.path / name).open("w", encoding="utf-8") as f:
            for messages in read_conversations(files, stats):
                f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
        out.metadata[f"{split}_conversations"] = stats.conversations
        out.metadata[f"{split}_skipped"] = dict(stats.skipped)
        out.metadata[f"{split}_skipped_at"] = stats.places
    if not out.metadata["train_conversations"]:
        raise InputError(
            f"{ctx.step.name}: no conversation in {config.train}: {out.metadata['train_skipped']}"
        )


class SFTRunConfig(BaseModel):
    """What an SFT run versions besides its base and data: its training (a short run from a trained model by
    default) and the chat template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train: TrainConfig = Field(
        TrainConfig(**run_files.SFT_DEFAULTS),
        description="the fine-tune's training; by default a short run from a trained model: 100 steps, peak "
        "LR 1e-3, 10 warmup steps",
    )
    chat_template: str = Field(DEFAULT_TEMPLATE, description="Jinja, as in tokenizer_config.json")


# revision 2: an MoE's padding is no longer routed (issue 48), so no fine-tune made before is reused
@stage(
    SFTRunConfig,
    revision=2,
    group="post_training",
    kinds=("jax",),
    checks=LOSS_CHECK,
    needs=("launcher",),
    headline=RUN_HEADLINE,
    labels=RUN_LABELS,
)
def sft_checkpoint(
    ctx: StepContext, out: PendingArtifact, config: SFTRunConfig, checkpoint: Artifact, chat_data: Artifact
) -> None:
    """The checkpoint fine-tuned on the chat data (assistant tokens only), with the held-out chat loss of the
    base and the tuned model side by side."""
    work = str(out.work).rstrip("/")
    heldout = [f"{chat_data.url}/{HELDOUT_CHATS}"] if chat_data.metadata.get("heldout_conversations") else []
    ctx.launcher.train(
        SFTLaunch(
            base=checkpoint.url,
            data=[f"{chat_data.url}/{TRAIN_CHATS}"],
            train=config.train,
            chat_template=config.chat_template,
            heldout=heldout,
            out=work,
        )
    )
    out.metadata.update(json.loads(read_url(f"{work}/{train_files.TRAIN_FILE}"))["summary"])
    out.metadata["data"] = json.loads(read_url(f"{work}/{run_files.SFT_DATA_FILE}"))
    if heldout:
        losses = json.loads(read_url(f"{work}/{run_files.HELDOUT_FILE}"))
        out.metadata.update(heldout_chat_loss_base=losses["base"], heldout_chat_loss_sft=losses["sft"])
        out.metadata["markdown"] = {"held-out chat loss": heldout_table(losses)}
    out.keep_work()
    out.metadata["plots"] = {"loss_curve": train_files.LOSS_CURVE_FILE}


def heldout_table(losses: dict[str, Any]) -> str:
    """Base vs tuned, in nats per assistant token."""
    change = losses["sft"] / losses["base"] - 1
    return (
        f"| model | held-out chat loss (nats per assistant token, {losses['assistant_tokens']} tokens) |\n"
        f"|---|---|\n| base | {losses['base']:.4f} |\n| sft | {losses['sft']:.4f} ({change:+.1%}) |"
    )
