"""lm-eval tasks through a chat template: the prompts a fine-tuned chat model receives are its template's
rendering of lm-eval's conversation, and the results record the template."""

import hashlib
import json

import numpy as np
import pytest
from flax import nnx
from lm_eval.api.instance import Instance

from marin_pipelines.cli import main
from marin_pipelines.evals.lm_eval_adapter import JaxLM
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR, run_tasks
from marin_pipelines.inference.sampling import SamplingParams
from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatTemplate
from marin_pipelines.tokenize.tokenizer import (
    EOS,
    TOKENIZER_FILE,
    SpecialTokens,
    TokenizerConfig,
    train_tokenizer,
)
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.train_config import CHAT_TEMPLATE_FILE, TrainConfig
from marin_pipelines.train.trainer import train

SEQ_LEN = 128  # a rendered prompt and 12 generated tokens fit
TERSE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}{% endfor %}"
TERSE += "{% if add_generation_prompt %}assistant:{% endif %}"
QA = [json.loads(line) for line in (SHIPPED_TASKS_DIR / "qa.jsonl").read_text().splitlines()]
TEXTS = [line for f in sorted(SHIPPED_TASKS_DIR.glob("*.jsonl")) for line in f.read_text().splitlines()]
HISTORY = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What keyword defines a function?"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS * 2, TokenizerConfig(vocab_size=300))


@pytest.fixture(scope="module")
def model_config(tokenizer) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), seq_len=SEQ_LEN, d_model=32, n_layers=1, n_heads=2,
        n_kv_heads=1, d_ff=64,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(model_config) -> Llama:
    return Llama(model_config, nnx.Rngs(0))


class RecordingLM(JaxLM):
    """The real model, with the contexts it is asked to continue written down."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.contexts: list[str] = []

    def generate_until(self, requests: list) -> list[str]:
        self.contexts += [request.args[0] for request in requests]
        return super().generate_until(requests)


def test_apply_chat_template_renders_as_the_chat_template(model, tokenizer):
    chat = ChatTemplate(tokenizer)
    lm = JaxLM(model, tokenizer, chat=chat)
    rendered = lm.apply_chat_template(HISTORY)
    assert rendered == chat.render(HISTORY, add_generation_prompt=True)
    assert rendered == (
        f"<|system|>\nAnswer in one word.{EOS}<|user|>\nWhat keyword defines a function?{EOS}<|assistant|>\n"
    )
    assert lm.apply_chat_template(HISTORY, add_generation_prompt=False) == chat.render(HISTORY)
    assert lm.chat_template(True) == DEFAULT_TEMPLATE and lm.chat_template(False) is None
    # the turns' ends are EOS tokens, as fine-tuning encoded them; in plain text they are bytes
    eos = tokenizer.token_to_id(EOS)
    assert lm.encode(rendered).count(eos) == 2
    assert eos not in JaxLM(model, tokenizer).encode(rendered)
    # a rendered conversation is what fine-tuning encoded: no BOS before it (plain text begins with BOS)
    assert lm.prompt_ids(rendered) == chat.tokenizer.encode(rendered, add_special_tokens=False).ids
    assert JaxLM(model, tokenizer).prompt_ids("def")[0] == tokenizer.token_to_id(EOS)

    plain = JaxLM(model, tokenizer)
    with pytest.raises(ValueError, match="no chat template"):
        plain.apply_chat_template(HISTORY)
    with pytest.raises(ValueError, match="no chat template"):
        _ = plain.tokenizer_name
    assert plain.chat_template(True) == ""

    terse = JaxLM(model, tokenizer, chat=ChatTemplate(tokenizer, TERSE))
    assert terse.apply_chat_template(HISTORY) == (
        f"system: Answer in one word.{EOS}user: What keyword defines a function?{EOS}assistant:"
    )
    assert terse.tokenizer_name != lm.tokenizer_name
    assert JaxLM(model, tokenizer, chat=ChatTemplate(tokenizer)).tokenizer_name == lm.tokenizer_name

    other = train_tokenizer(["something else entirely"] * 4, TokenizerConfig(vocab_size=280))
    with pytest.raises(ValueError, match="another tokenizer"):
        JaxLM(model, tokenizer, chat=ChatTemplate(other))


def test_a_generation_task_prompts_through_the_chat_template(model, tokenizer, tmp_path):
    chat = ChatTemplate(tokenizer)
    questions = [f"Question: {r['question']}\nAnswer:" for r in QA[:3]]

    lm = RecordingLM(model, tokenizer, batch_size=2, chat=chat)
    results = run_tasks(lm, ["marin_python_qa"], [], tmp_path / "chat", limit=3, chat_template=True)
    expected = [chat.render([{"role": "user", "content": q}], add_generation_prompt=True) for q in questions]
    assert sorted(lm.contexts) == sorted(expected)
    assert results["chat_template"] == DEFAULT_TEMPLATE
    assert results["chat_template_sha"] == hashlib.sha256(DEFAULT_TEMPLATE.encode()).hexdigest()
    assert results["fewshot_as_multiturn"] is True
    assert results["n-samples"]["marin_python_qa"]["effective"] == 3
    assert 0 <= results["results"]["marin_python_qa"]["exact_match,strip"] <= 1

    lm = RecordingLM(model, tokenizer, batch_size=2, chat=chat)  # a template, not applied
    results = run_tasks(lm, ["marin_python_qa"], [], tmp_path / "plain", limit=3)
    assert sorted(lm.contexts) == sorted(questions)
    assert results["chat_template"] is None and results["chat_template_sha"] is None

    with pytest.raises(ValueError, match="no chat template"):
        run_tasks(JaxLM(model, tokenizer), ["marin_python_qa"], [], tmp_path / "none", 1, chat_template=True)


def test_a_sampled_task_asks_its_question_as_the_user_s_turn(model, tokenizer, tmp_path):
    """marin_python_doc as the SFT demo runs it: the question as the user's turn, the assistant's opened;
    four samples of each question, scored."""
    chat = ChatTemplate(tokenizer)
    lm = RecordingLM(model, tokenizer, chat=chat)
    results = run_tasks(lm, ["marin_python_doc"], [], tmp_path, limit=2, chat_template=True)
    functions = (SHIPPED_TASKS_DIR / "functions.jsonl").read_text().splitlines()[:2]
    questions = [f"Question: What does `{json.loads(f)['name']}` do?\nAnswer:" for f in functions]
    expected = [chat.render([{"role": "user", "content": q}], add_generation_prompt=True) for q in questions]
    assert sorted(lm.contexts) == sorted(expected * 4)
    assert set(results["results"]["marin_python_doc"]) >= {"f1,samples", "f1_best,samples"}


def test_generation_stops_at_the_run_s_end_of_turn_token(model, tokenizer):
    """A chat model's own end-of-turn token (an imported one's ``<|eot_id|>``) ends its answer."""
    prompt = ChatTemplate(tokenizer).render(HISTORY, add_generation_prompt=True)
    plain = JaxLM(model, tokenizer, chat=ChatTemplate(tokenizer))
    free = plain.engine.generate([plain.prompt_ids(prompt)], SamplingParams(max_new_tokens=8))[0]
    assert len(free.tokens) == 8
    turn_end = next(t for t in free.tokens[2:] if t not in free.tokens[:2])  # one it writes 3rd or later
    specials = SpecialTokens(stop=(tokenizer.id_to_token(turn_end),))
    lm = JaxLM(model, tokenizer, chat=ChatTemplate(tokenizer, specials=specials), specials=specials)
    request = Instance("generate_until", {}, (prompt, {"until": [], "max_gen_toks": 8}), 0)
    (answer,) = lm.generate_until([request])
    assert answer == tokenizer.decode(free.tokens[: free.tokens.index(turn_end)]) and answer != free.text


@pytest.fixture(scope="module")
def chat_run(tokenizer, model_config, tmp_path_factory):
    """A fine-tuned run's directory: a checkpoint, its tokenizer and the chat template it was tuned with."""
    directory = tmp_path_factory.mktemp("chat_run")
    tokenizer.save(str(directory / TOKENIZER_FILE))
    (directory / CHAT_TEMPLATE_FILE).write_text(TERSE)
    stream = np.asarray(tokenizer.encode(" ".join(TEXTS)).ids, np.int32)
    rows = SEQ_LEN + 1
    batches = lambda step: np.stack([stream[i * rows : (i + 1) * rows] for i in range(2)])  # noqa: E731
    train(model_config, TrainConfig(steps=1, batch_size=2, warmup_steps=0), batches, directory, False)
    return directory


def test_eval_cli_runs_tasks_through_the_run_s_chat_template(chat_run, tmp_path, capsys):
    held = tmp_path / "held.jsonl"
    turns = [{"role": "user", "content": "A list?"}, {"role": "assistant", "content": "Ordered."}]
    held.write_text(json.dumps({"messages": turns}) + "\n")
    default = tmp_path / "default.jinja"
    default.write_text(DEFAULT_TEMPLATE)
    terse = tmp_path / "terse.jinja"
    terse.write_text(TERSE)
    base = ["eval", "--checkpoint", str(chat_run), "--tasks", "marin_python_qa", "--chat-tasks"]
    base += ["--limit", "2", "--chat", f"held={held}"]

    def run(*extra: str) -> dict:
        out = tmp_path / "eval.json"
        assert main([*base, *extra, "--out", str(out)]) == 0
        return json.loads(out.read_text())

    own, explicit, marin = run(), run("--chat-template", str(terse)), run("--chat-template", str(default))
    assert own["chat_template"] == explicit["chat_template"] == TERSE  # the run's template by default
    assert own["chat"] == explicit["chat"]  # the chat sets' template too
    assert own["n-samples"]["marin_python_qa"]["effective"] == 2
    assert marin["chat_template"] == DEFAULT_TEMPLATE
    assert marin["chat"]["held"]["tokens"] != own["chat"]["held"]["tokens"]

    no_tasks = ["eval", "--checkpoint", str(chat_run), "--chat-tasks", "--chat", str(held)]
    assert main([*no_tasks, "--out", str(tmp_path / "x.json")]) == 2
    assert "give --tasks" in capsys.readouterr().err
