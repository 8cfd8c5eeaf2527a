"""The demo's chat data: built from this Python's docstrings, the same bytes every time, every line a valid
conversation, answers taken from the documentation, held-out modules never in training."""

from pathlib import Path

import pytest

from marin_pipelines.stdlib_material import stdlib_material_isolated
from marin_pipelines.tokenize.chat_data import ChatStats, read_conversations
from marin_pipelines.tokenize.demo_chat import HELDOUT_FILE, TRAIN_FILE, DemoChatConfig, build_demo_chat

CONFIG = DemoChatConfig(
    modules=("json", "textwrap", "heapq", "bisect", "fractions", "shlex"), heldout_fraction=0.3
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chat")
    build_demo_chat(out, CONFIG)
    return out


def test_the_same_bytes_every_time(built, tmp_path):
    build_demo_chat(tmp_path, CONFIG)
    for name in (TRAIN_FILE, HELDOUT_FILE):
        assert (tmp_path / name).read_bytes() == (built / name).read_bytes()


def test_every_line_is_a_conversation_answered_from_the_docs(built):
    stats = ChatStats()
    train = list(read_conversations([built / TRAIN_FILE], stats))
    heldout = list(read_conversations([built / HELDOUT_FILE], stats))
    assert not stats.skipped and len(train) >= 10 and len(heldout) >= 5
    docs = " ".join(
        " ".join(text.split())
        for _, _, blocks in stdlib_material_isolated(CONFIG.modules)["library"]
        for _, text in blocks
    )
    for messages in train + heldout:
        assert [m["role"] for m in messages] == ["system", "user", "assistant"]
        answer = messages[2]["content"].split("`: ", 1)[1]
        assert answer in docs  # the first sentences of a docstring, not made up

    def asked(conversations):
        return {m[1]["content"].split("`")[1] for m in conversations}

    assert not asked(train) & asked(heldout)  # held-out questions are about other functions
