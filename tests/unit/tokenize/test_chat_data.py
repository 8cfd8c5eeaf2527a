"""Chat data: conversations read with bad lines counted, the assistant's tokens found through the chat
template, examples packed whole with segment ids."""

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from marin_pipelines.tokenize.chat_data import ChatStats, ChatTemplate, pack, read_conversations
from marin_pipelines.tokenize.tokenizer import EOS, TokenizerConfig, train_tokenizer

CHAT = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What does dedup remove?"},
    {"role": "assistant", "content": "Copies of paragraphs and near copies of pages."},
    {"role": "user", "content": "And the filters?"},
    {"role": "assistant", "content": "Pages that fail the quality rules."},
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = [m["content"] for m in CHAT] * 20 + ["system user assistant answer question page"] * 20
    return train_tokenizer(texts, TokenizerConfig(vocab_size=400))


def test_bad_lines_are_skipped_and_counted_with_their_places(tmp_path: Path) -> None:
    lines = [
        json.dumps({"messages": CHAT}),
        "{not json",
        json.dumps({"text": "no messages here"}),
        json.dumps({"messages": [{"role": "robot", "content": "beep"}]}),
        json.dumps({"messages": [{"role": "user", "content": ["a", "list"]}]}),
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),
        "",
        json.dumps({"messages": CHAT[:3], "id": 7}),
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n")
    stats = ChatStats()
    conversations = list(read_conversations([path], stats))
    assert conversations == [CHAT, CHAT[:3]]
    assert stats.conversations == 2
    assert stats.skipped == {
        "not_json": 1, "no_messages": 1, "unknown_role": 1, "content_not_text": 1, "no_assistant_turn": 1
    }  # fmt: skip
    assert stats.places["not_json"] == [f"{path}:2"]


def test_only_the_assistants_tokens_are_masked(tokenizer: Tokenizer) -> None:
    template = ChatTemplate(tokenizer)
    ids, assistant = template.encode(CHAT)
    assert len(ids) == len(assistant) and assistant.any() and not assistant.all()
    runs = np.split(np.arange(len(ids)), np.flatnonzero(np.diff(assistant.astype(int))) + 1)
    said = [
        tokenizer.decode(ids[run].tolist(), skip_special_tokens=False) for run in runs if assistant[run[0]]
    ]
    assert said == [CHAT[2]["content"] + EOS, CHAT[4]["content"] + EOS]  # each answer and its end, no more
    eos = tokenizer.token_to_id(EOS)
    assert ids.tolist().count(eos) == len(CHAT) and ids[assistant].tolist().count(eos) == 2  # real EOS ids
    kept = tokenizer.decode(ids[~assistant].tolist(), skip_special_tokens=False)
    assert "<|assistant|>" in kept and CHAT[1]["content"] in kept and "Copies" not in kept


def test_a_template_whose_prefixes_are_not_prefixes_is_refused(tokenizer: Tokenizer) -> None:
    reversed_template = "{% for m in messages|reverse %}{{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ValueError, match="prefix"):
        ChatTemplate(tokenizer, reversed_template).encode(CHAT)


def test_examples_are_packed_whole_and_targets_never_cross_them() -> None:
    def example(n: int, first: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(first, first + n, dtype=np.int32), np.arange(n) >= n // 2  # second half: assistant

    stats = ChatStats()
    packed = list(pack([example(5, 100), example(4, 200), example(6, 300), example(12, 400)], 8, stats))
    assert [p.tokens.tolist() for p in packed] == [
        [100, 101, 102, 103, 104, 200, 201, 202, 203],
        [300, 301, 302, 303, 304, 305, 0, 0, 0],
        [400, 401, 402, 403, 404, 405, 406, 407, 408],  # cut to one sequence
    ]
    assert packed[0].segments.tolist() == [1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert packed[1].segments.tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0]
    # targets: position t predicts t + 1; none from example 1 into example 2, none into padding
    assert packed[0].target_weights.tolist() == [0, 1, 1, 1, 0, 0, 1, 1]
    assert packed[1].target_weights.tolist() == [0, 0, 1, 1, 1, 0, 0, 0]
    assert stats.truncated == 1 and stats.tokens == 5 + 4 + 6 + 9


def test_an_example_cut_before_the_assistant_speaks_is_left_out_and_counted() -> None:
    prompt_only = (np.arange(20, dtype=np.int32), np.arange(20) >= 15)  # the answer starts after 9 tokens
    fits = (np.arange(100, 104, dtype=np.int32), np.array([False, False, True, True]))
    stats = ChatStats()
    packed = list(pack([prompt_only, fits], 8, stats))
    assert [p.tokens[:4].tolist() for p in packed] == [[100, 101, 102, 103]]
    assert (stats.cut_off, stats.truncated, stats.tokens) == (1, 0, 4)
    assert stats.as_dict()["cut_off"] == 1
