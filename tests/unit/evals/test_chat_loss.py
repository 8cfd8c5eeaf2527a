"""The held-out chat loss is the mean loss of the assistant's tokens, each conversation scored alone:
packing and batching change nothing."""

import numpy as np
import optax
import pytest
from flax import nnx
from tokenizers import Tokenizer

from marin_pipelines.evals.chat_loss import chat_loss
from marin_pipelines.tokenize.chat_data import ChatTemplate
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import Llama, LlamaConfig

CHATS = [
    [{"role": "user", "content": f"Question {i}: what is {i} plus {i}?"},
     {"role": "assistant", "content": f"It is {2 * i}."}]
    for i in range(7)
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = [m["content"] for chat in CHATS for m in chat] * 10
    return train_tokenizer(texts, TokenizerConfig(vocab_size=300))


def small_model(tokenizer: Tokenizer, seq_len: int) -> Llama:
    shape = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64}
    return Llama(LlamaConfig(vocab_size=tokenizer.get_vocab_size(), seq_len=seq_len, **shape), nnx.Rngs(0))


def test_chat_loss_equals_each_conversation_alone(tokenizer: Tokenizer, tmp_path) -> None:
    import json

    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps({"messages": chat}) for chat in CHATS))
    model = small_model(tokenizer, seq_len=128)
    template = ChatTemplate(tokenizer)
    result = chat_loss(model, template, [path], batch_size=2)
    total, count = 0.0, 0
    for chat in CHATS:  # unpacked, one conversation per row, no segments
        ids, assistant = template.encode(chat)
        nll = np.asarray(
            optax.softmax_cross_entropy_with_integer_labels(model(ids[None, :-1]), ids[None, 1:])
        )[0]
        total += float(nll[assistant[1:]].sum())
        count += int(assistant[1:].sum())
    assert result["truncated"] == 0 and result["conversations"] == len(CHATS)
    assert result["assistant_tokens"] == count
    assert result["loss"] == pytest.approx(total / count, rel=1e-5)


def test_no_scored_token_is_a_null_loss_with_its_reason(tokenizer: Tokenizer, tmp_path) -> None:
    import json

    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": CHATS[0]}) + "\n")
    model = small_model(tokenizer, seq_len=8)  # shorter than any conversation's turns before the answer
    result = chat_loss(model, ChatTemplate(tokenizer), [path], batch_size=2)
    assert result["loss"] is None and "within seq_len 8" in result["no_loss"]
    (tmp_path / "bad.jsonl").write_text("not json\n")
    result = chat_loss(model, ChatTemplate(tokenizer), [tmp_path / "bad.jsonl"], 2)
    assert result["loss"] is None and "not_json" in result["no_loss"]
