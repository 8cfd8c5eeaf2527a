"""``generate_until`` through lm-eval's own evaluator, on the generation engine: greedy gives what the engine
gives alone, ``until`` cuts exactly, ``max_gen_toks`` is kept, sampling with a seed gives the same samples
again, and a task's repeats are samples of their own."""

import json

import pytest
import yaml
from flax import nnx
from lm_eval import simple_evaluate
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from marin_pipelines.evals.lm_eval_adapter import JaxLM
from marin_pipelines.inference.engine import Engine
from marin_pipelines.inference.sampling import SamplingParams
from marin_pipelines.tokenize.tokenizer import EOS, TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import Llama, LlamaConfig

PROMPTS = ["def read", "The json module converts", "A list is", "Question: What keyword defines a function?"]
TOKENIZER = train_tokenizer(
    [p + " objects to text and back" for p in PROMPTS] * 4, TokenizerConfig(vocab_size=300)
)
EOS_ID = TOKENIZER.token_to_id(EOS)
CONFIG = LlamaConfig(
    vocab_size=TOKENIZER.get_vocab_size(),
    seq_len=64,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    d_ff=64,
)
SAMPLED = {"do_sample": True, "temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_gen_toks": 8}


@pytest.fixture(scope="module")
def model() -> Llama:
    return Llama(CONFIG, nnx.Rngs(0))


@pytest.fixture(scope="module")
def alone(model) -> Engine:
    """The engine by itself, one slot: what each prompt gets alone."""
    return Engine(model, TOKENIZER, stop_tokens=[EOS_ID], slots=1)


def engine_alone(engine: Engine, params: SamplingParams) -> list:
    return engine.generate([[EOS_ID, *TOKENIZER.encode(p).ids] for p in PROMPTS], params)


def evaluate(lm: JaxLM, folder, generation_kwargs: dict, repeats: int = 1) -> list[list[str]]:
    """Every prompt's responses (``repeats`` each) from lm-eval's evaluator running a task of them."""
    folder.mkdir()
    (folder / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    task = {
        "task": "prompts",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(folder / "prompts.jsonl")}},
        "output_type": "generate_until",
        "test_split": "test",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "",
        "generation_kwargs": generation_kwargs,
        "repeats": repeats,
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
    }
    (folder / "prompts.yaml").write_text(yaml.safe_dump(task))
    manager = TaskManager(include_path=[str(folder)], include_defaults=False)
    results = simple_evaluate(model=lm, tasks=["prompts"], task_manager=manager, log_samples=True)
    samples = sorted(results["samples"]["prompts"], key=lambda s: s["doc_id"])
    assert [s["doc"]["prompt"] for s in samples] == PROMPTS
    return [s["resps"][0] for s in samples]


def test_greedy_is_the_engine_s_alone_and_keeps_max_gen_toks(model, alone, tmp_path):
    lm = JaxLM(model, TOKENIZER, batch_size=3)  # 4 prompts on 3 slots: one waits for a free slot
    six = evaluate(lm, tmp_path / "six", {"until": [], "max_gen_toks": 6})
    expected = engine_alone(alone, SamplingParams(max_new_tokens=6))
    assert six == [[done.text] for done in expected]
    assert all(len(done.tokens) <= 6 for done in expected)
    assert sum(done.finish_reason == "length" and len(done.tokens) == 6 for done in expected) >= 2
    twelve = evaluate(lm, tmp_path / "twelve", {"until": [], "max_gen_toks": 12, "do_sample": False})
    assert [r[0] for r in twelve] == [
        done.text for done in engine_alone(alone, SamplingParams(max_new_tokens=12))
    ]
    for short, long in zip(six, twelve, strict=True):  # a longer budget goes on where the shorter stopped
        assert long[0].startswith(short[0].rstrip("\ufffd"))


def test_until_cuts_before_the_first_stop_string(model, alone, tmp_path):
    free = [done.text for done in engine_alone(alone, SamplingParams(max_new_tokens=12))]
    # an ASCII character that the first prompt's text has after a few characters: a stop cut mid-text
    stop = next(c for c in free[0][2:] if c.isascii() and c.isprintable() and c != " ")
    lm = JaxLM(model, TOKENIZER, batch_size=2)
    cut = evaluate(lm, tmp_path / "cut", {"until": [stop, "never written"], "max_gen_toks": 12})
    assert cut == [[text[: text.find(stop)] if stop in text else text] for text in free]
    assert stop not in "".join(r[0] for r in cut) and cut[0][0] != free[0]


def test_sampling_with_a_seed_gives_the_same_samples_again_and_each_repeat_its_own(model, alone, tmp_path):
    lm = JaxLM(model, TOKENIZER, batch_size=4)
    first = evaluate(lm, tmp_path / "first", {**SAMPLED, "seed": 7}, repeats=3)
    again = evaluate(
        JaxLM(model, TOKENIZER, batch_size=2), tmp_path / "again", {**SAMPLED, "seed": 7}, repeats=3
    )
    assert first == again  # the same seed, other batches: the same samples
    assert all(len(set(samples)) == 3 for samples in first)  # the repeats are three samples
    # the first copy is what the engine samples for the prompt alone with that seed
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.95, seed=7)
    assert [samples[0] for samples in first] == [done.text for done in engine_alone(alone, params)]
    other = evaluate(lm, tmp_path / "other", {**SAMPLED, "seed": 8}, repeats=3)
    assert all(not set(a) & set(b) for a, b in zip(first, other, strict=True))
    unseeded = [evaluate(lm, tmp_path / f"unseeded{i}", SAMPLED, repeats=2) for i in range(2)]
    assert unseeded[0] == unseeded[1]  # no seed given: the adapter's own, so the scores are reproducible


def request(kwargs: dict) -> Instance:
    return Instance(request_type="generate_until", doc={}, arguments=("def", kwargs), idx=0)


def test_settings_lm_eval_cannot_have_are_refused_naming_them(model):
    lm = JaxLM(model, TOKENIZER)
    settings = lm.generation_settings({"until": "\n", "max_new_tokens": 5, "temperature": 0.5, "top_k": 3})
    assert settings == SamplingParams(max_new_tokens=5, temperature=0.5, top_k=3, stop=("\n",), seed=1234)
    assert lm.generation_settings({"do_sample": False, "temperature": 0.7}).temperature == 0  # lm-eval's rule
    assert lm.generation_settings({"do_sample": True}).temperature == 1.0  # Hugging Face's default
    with pytest.raises(ValueError, match=r"\['num_beams'\] are not supported"):
        lm.generate_until([request({"num_beams": 4})])
    with pytest.raises(ValueError, match=r"max_gen_toks must lie in \[1, 64\)"):
        lm.generate_until([request({"max_gen_toks": 64})])
    with pytest.raises(ValueError, match="top_p"):
        lm.generate_until([request({"do_sample": True, "top_p": 1.5})])
