import json

import jax
import numpy as np
import pytest
from flax import nnx
from lm_eval.api.instance import Instance

from marin_pipelines.evals.checkpoint_eval import (
    EvalConfig,
    evaluate_checkpoint,
    missing_tasks,
    results_table,
    scores,
)
from marin_pipelines.evals.lm_eval_adapter import JaxLM
from marin_pipelines.evals.lm_eval_tasks import QUICK_TASKS, SHIPPED_TASKS_DIR, run_tasks, task_scores
from marin_pipelines.tokenize.tokenizer import EOS, TokenizerConfig, train_tokenizer
from marin_pipelines.train.checkpoint import load_checkpoint
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

SEQ_LEN = 64


def records(name: str) -> list[dict]:
    return [json.loads(line) for line in (SHIPPED_TASKS_DIR / f"{name}.jsonl").read_text().splitlines()]


def answer_texts() -> list[str]:
    """Text that contains every shipped task's answers, in the tasks' own prompt formats."""
    texts = [f"Question: {r['question']}\nAnswer: {r['choices'][r['answer']]}" for r in records("mc")]
    texts += [f"{r['context']} {r['word']}" for r in records("cloze")]
    texts += [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in records("qa")]
    return texts + [r["text"] for r in records("text")]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(answer_texts() * 4, TokenizerConfig(vocab_size=512))


@pytest.fixture(scope="module")
def model_config(tokenizer) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), seq_len=SEQ_LEN, d_model=64, n_layers=2, n_heads=4,
        n_kv_heads=2, d_ff=128,
    )  # fmt: skip


@pytest.fixture(scope="module")
def untrained(model_config) -> Llama:
    return Llama(model_config, nnx.Rngs(0))


@pytest.fixture(scope="module")
def trained(tokenizer, model_config, tmp_path_factory) -> Llama:
    """A small model trained briefly on the answers: every document after EOS, as in a token cache."""
    eos = tokenizer.token_to_id(EOS)
    docs = [[eos, *tokenizer.encode(t, add_special_tokens=False).ids] for t in answer_texts()]
    config = TrainConfig(steps=150, batch_size=16, learning_rate=1e-2, warmup_steps=10)

    def batch_fn(step: int) -> np.ndarray:
        rng = np.random.default_rng(step)
        stream = np.concatenate([docs[i] for i in rng.permutation(len(docs))] * 2)
        starts = rng.integers(0, len(stream) - SEQ_LEN - 1, config.batch_size)
        return np.stack([stream[s : s + SEQ_LEN + 1] for s in starts]).astype(np.int32)

    out = tmp_path_factory.mktemp("trained")
    train(model_config, config, batch_fn, out, progress=False)
    return load_checkpoint(out)[0]


@nnx.jit
def forward(model: Llama, tokens: jax.Array) -> jax.Array:
    return model(tokens)


def log_probs(model: Llama, tokens: list[int]) -> np.ndarray:
    """log p(tokens[i + 1] | tokens[: i + 1]) for every i, from one direct forward pass."""
    logp = np.asarray(jax.nn.log_softmax(forward(model, np.asarray([tokens[:-1]], np.int32))[0]), np.float64)
    return logp[np.arange(len(tokens) - 1), tokens[1:]]


def request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def test_loglikelihood_equals_a_direct_forward_pass(untrained, tokenizer):
    lm = JaxLM(untrained, tokenizer, batch_size=3)  # 5 requests: two batches, one padded
    eos = tokenizer.token_to_id(EOS)
    pairs = [
        ("Question: Which keyword defines a function?\nAnswer:", " def"),
        ("The capital city of France is ", "Paris"),  # the space moves to the continuation, as in lm-eval
        ("", "Hello"),  # empty context: the continuation is scored after EOS alone
        ("A list is a mutable sequence. " * 8, "The built-in function len"),  # over 64: cut on the left
        ("x", " " + "token " * 30),
    ]
    results = lm.loglikelihood([request("loglikelihood", c, x) for c, x in pairs])
    for (context, continuation), (logp, greedy) in zip(pairs, results, strict=True):
        context, continuation = context.rstrip(" "), context[len(context.rstrip(" ")) :] + continuation
        context_ids = [eos, *tokenizer.encode(context, add_special_tokens=False).ids]
        whole = [eos, *tokenizer.encode(context + continuation, add_special_tokens=False).ids]
        assert whole[: len(context_ids)] == context_ids  # the join is a token boundary in these cases
        scored = len(whole) - len(context_ids)
        direct = log_probs(untrained, whole[-(SEQ_LEN + 1) :])[-scored:]  # the model's window: 64 inputs
        assert logp == pytest.approx(direct.sum(), rel=1e-4, abs=1e-4)
        assert logp < 0 and not greedy  # an untrained model predicts none of these


def test_greedy_flag_is_true_when_the_continuation_is_the_argmax(trained, tokenizer):
    lm = JaxLM(trained, tokenizer)
    eos = tokenizer.token_to_id(EOS)
    context = [eos, *tokenizer.encode("Question: What module parses JSON?\nAnswer:").ids]
    logits = np.asarray(forward(trained, np.asarray([context], np.int32))[0, -1])
    best = tokenizer.decode([int(logits.argmax())])
    second = tokenizer.decode([int(np.argsort(logits)[-2])])
    context_text = "Question: What module parses JSON?\nAnswer:"
    results = lm.loglikelihood([request("loglikelihood", context_text, best)])
    results += lm.loglikelihood([request("loglikelihood", context_text, second)])
    assert [greedy for _, greedy in results] == [True, False]


@pytest.mark.parametrize("max_length", [16, 64])
def test_rolling_loglikelihood_counts_every_token_once(untrained, tokenizer, max_length):
    text = " ".join(records("text")[i]["text"] for i in range(3))  # ~100 tokens: several 16-token windows
    lm = JaxLM(untrained, tokenizer, batch_size=4)
    lm.max_length = max_length
    tokens = tokenizer.encode(text, add_special_tokens=False).ids
    windows = lm.rolling_windows(text)
    assert [t for _, continuation in windows for t in continuation] == tokens  # each token once, in order
    # Independently: token i sits in window i // L, which reads the L tokens before that window's end.
    full = [tokenizer.token_to_id(EOS), *tokens]
    expected = 0.0
    for start in range(0, len(tokens), max_length):
        end = min(start + max_length, len(tokens))
        window = full[max(0, end - max_length) : end + 1]
        expected += log_probs(untrained, window)[-(end - start) :].sum()
    (total,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)])
    assert total == pytest.approx(expected, rel=1e-4)


def greedy_direct(model: Llama, tokenizer, context: str, steps: int) -> str:
    """Greedy decoding one token at a time, unbatched, with no padding, up to EOS."""
    eos = tokenizer.token_to_id(EOS)
    tokens = [eos, *tokenizer.encode(context, add_special_tokens=False).ids]
    start = len(tokens)
    for _ in range(steps):
        tokens.append(int(np.asarray(forward(model, np.asarray([tokens], np.int32))[0, -1]).argmax()))
        if tokens[-1] == eos:
            return tokenizer.decode(tokens[start:-1])
    return tokenizer.decode(tokens[start:])


def test_generate_until_is_greedy_and_stops(trained, tokenizer):
    lm = JaxLM(trained, tokenizer, batch_size=2)  # 3 prompts of different lengths on 2 slots: one waits
    prompts = [
        "Question: What keyword defines a function?\nAnswer:",
        "Question: What is the capital of Italy?\nAnswer:",
        "The json module converts",
    ]
    free = lm.generate_until(
        [request("generate_until", p, {"until": [], "max_gen_toks": 4}) for p in prompts]
    )
    assert free == [greedy_direct(trained, tokenizer, p, 4) for p in prompts]
    assert all(len(tokenizer.encode(text).ids) <= 4 for text in free)
    stopped = lm.generate_until(
        [request("generate_until", p, {"until": ["\n"], "max_gen_toks": 12}) for p in prompts[:2]]
    )
    assert stopped == [" def", " Rome"]  # learned, and cut before the newline that follows


def test_trained_model_beats_an_untrained_one(trained, untrained, tokenizer, tmp_path):
    config = EvalConfig(heldout={"python_text": [str(SHIPPED_TASKS_DIR / "text.jsonl")]})
    before = evaluate_checkpoint(untrained, tokenizer, {}, config, batch_size=8)["bpb"]
    after = evaluate_checkpoint(trained, tokenizer, {}, config, batch_size=8)["bpb"]
    assert after["python_text"]["bits_per_byte"] < 0.5 * before["python_text"]["bits_per_byte"]
    assert after["overall"] == after["python_text"]

    results = {
        name: task_scores(run_tasks(JaxLM(model, tokenizer), list(QUICK_TASKS), [], tmp_path / name))
        for name, model in (("untrained", untrained), ("trained", trained))
    }
    untrained_scores, trained_scores = results["untrained"], results["trained"]
    assert trained_scores["marin_python_mc"]["acc"] > untrained_scores["marin_python_mc"]["acc"]
    assert trained_scores["marin_python_cloze"]["acc"] > untrained_scores["marin_python_cloze"]["acc"]
    assert (
        trained_scores["marin_python_qa"]["exact_match"] > untrained_scores["marin_python_qa"]["exact_match"]
    )
    assert (
        trained_scores["marin_python_text"]["bits_per_byte"]
        < untrained_scores["marin_python_text"]["bits_per_byte"]
    )
    print(json.dumps(results, indent=1))


def test_a_task_without_a_number_is_reported_missing():
    flat = scores({"results": {"a": {"acc,none": 0.5, "acc_stderr,none": "N/A"}, "b": {"alias": "b"}}})
    assert flat == {"a/acc": 0.5}
    assert missing_tasks(["a", "b", "c"], flat) == ["b", "c"]
    assert missing_tasks(["a"], {"a/acc": float("nan")}) == ["a"]


def test_results_table_shows_the_change_against_the_previous_version():
    table = results_table({"bpb/main": 1.25, "marin_python_mc/acc": 0.5}, {"bpb/main": 1.5})
    assert "| bpb/main | 1.25 | 1.5 | -0.25 |" in table
    assert "| marin_python_mc/acc | 0.5 |  | new |" in table
