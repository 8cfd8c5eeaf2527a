"""Greedy generation here equals Hugging Face transformers' token for token, on two models:

(a) an exported run: a small model trained here (grouped-query attention) on the project's README and docs,
    written out by export-hf, loaded by transformers' ``AutoModelForCausalLM``;
(b) an imported Hugging Face Llama with grouped-query attention: a random ``LlamaForCausalLM`` (8 query heads
    over 2 key/value heads, no rope_scaling) with a byte-level BPE tokenizer, made and saved by transformers
    (``save_pretrained``), brought in by import-hf.

Both sides greedily continue the same prompt ids for NEW_TOKENS tokens with no stop token (this project's
engine all prompts in one continuously batched run, transformers each prompt alone); the verdict per
prompt is whether the token ids are equal, and whether transformers' own tokenizer encodes the prompt to the
same ids. transformers runs in the peer venv (``hf_peer.py``). Exits 1 when any prompt differs.

Run: ``.venv/bin/python bench/hf_greedy.py``
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from hf_peer import imported_random_llama, peer

NEW_TOKENS = 32
STEPS = 600
PROJECT = Path(__file__).resolve().parents[1]
DOCS = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]  # the text it trains on
EXPORTED_PROMPTS = [
    "The asset graph",
    "Training",
    "marin-pipelines export-hf",
    "A step's output lives at",
    "Every document stage writes",
    "The tokenizer",
]
IMPORTED_PROMPTS = [
    "The quick brown fox",
    "Grouped-query attention shares",
    "A model brought in",
    "one at a time",
    "zebra",
    "The lazy dog.",
]
# (b)'s model: weights drawn wider than HF's default (0.02), so that the next token is clearly the likeliest
# and a tie within float rounding cannot decide the comparison
IMPORTED_CONFIG = {
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 500_000.0,
    "tie_word_embeddings": False,
    "initializer_range": 0.2,
}


def trained_run(folder: Path) -> Path:
    """A 2-layer model (4 query heads over 2 key/value heads) trained for STEPS steps on the README's and
    docs' text (its whitespace collapsed: the model then continues in words, not in blank lines)."""
    from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
    from marin_pipelines.train.model import LlamaConfig
    from marin_pipelines.train.train_config import TrainConfig
    from marin_pipelines.train.trainer import train

    paragraphs = [p for doc in DOCS for p in doc.read_text().split("\n\n") if p.strip()]
    tokenizer = train_tokenizer(paragraphs, TokenizerConfig(vocab_size=1000))
    run = folder / "run"
    run.mkdir()
    tokenizer.save(str(run / TOKENIZER_FILE))
    text = " ".join(" ".join(p.split()) for p in paragraphs)
    stream = np.asarray(tokenizer.encode(text).ids, np.int32)
    model = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        seq_len=128,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=192,
    )
    windows = len(stream) // 129 - 1

    def batches(step: int) -> np.ndarray:
        return np.stack([stream[((step * 8 + i) % windows) * 129 :][:129] for i in range(8)])

    config = TrainConfig(
        steps=STEPS, batch_size=8, learning_rate=3e-3, warmup_steps=10, checkpoint_every=STEPS
    )
    train(model, config, batches, run, progress=False)
    return run


def compare(name: str, run_dir: Path, hf_folder: Path, prompts: list[str]) -> int:
    """Greedy tokens of both on ``prompts``; prints a verdict per prompt; returns how many differ."""
    from marin_pipelines.inference.engine import Engine
    from marin_pipelines.inference.sampling import SamplingParams
    from marin_pipelines.train.trained_run import load_run

    run = load_run(run_dir)
    ids = [run.encode(text) for text in prompts]
    engine = Engine(run.model, run.tokenizer, slots=4)  # fewer slots than prompts: slots are refilled
    ours = engine.generate(ids, SamplingParams(max_new_tokens=NEW_TOKENS))
    request = {"texts": prompts, "ids": ids, "new_tokens": NEW_TOKENS}
    theirs = peer("greedy", str(hf_folder), json.dumps(request))["completions"]
    config = run.model.config
    print(f"\n{name}: {config.n_heads} query heads over {config.n_kv_heads} key/value heads")
    differ = 0
    for text, prompt, mine, hf in zip(prompts, ids, ours, theirs, strict=True):
        same = mine.tokens == hf["tokens"]
        shorter = min(len(mine.tokens), len(hf["tokens"]))
        at = next((i for i in range(shorter) if mine.tokens[i] != hf["tokens"][i]), shorter)
        verdict = "equal" if same else f"DIFFERENT from token {at}"
        ids_note = tokenizer_note(hf["own_ids"], prompt)
        print(f"  {text!r}: {len(mine.tokens)} tokens {verdict} ({ids_note}); {mine.text[:60]!r}")
        differ += not same
    return differ


def tokenizer_note(own: list[int], prompt: list[int]) -> str:
    """Whether transformers' tokenizer encodes the prompt's text to the ids both sides generated from."""
    if own == prompt:
        return "HF's tokenizer: the same prompt ids"
    if own == prompt[1:]:
        return "HF's tokenizer: the same ids less the BOS"
    return "HF's tokenizer: other prompt ids"


def main() -> None:
    from marin_pipelines.train.export import export_hf

    print("peer:", json.dumps(peer("versions")))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        run = trained_run(work)
        export_hf(run, work / "export")
        differ = compare("(a) a run trained here, export-hf", run, work / "export", EXPORTED_PROMPTS)
        hf, imported = imported_random_llama(IMPORTED_CONFIG, work / "imported")
        differ += compare("(b) a random LlamaForCausalLM, import-hf", imported, hf, IMPORTED_PROMPTS)
    total = len(EXPORTED_PROMPTS) + len(IMPORTED_PROMPTS)
    print(f"\ngreedy generations equal to Hugging Face's: {total - differ} of {total}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
