"""Hugging Face transformers as the peer of the generation benches (``decode.py``, ``hf_greedy.py``).

The project does not depend on torch, so the peer lives in a venv of its own, ``bench/.hf-peer`` (ignored by
git; made on first use: torch from this machine's disk, transformers 5 from the registry), and runs as a
subprocess: this file is both the project side (``ensure_peer``, ``peer``) and, run by the peer's Python,
the commands the peer answers, each printing one JSON line:

- ``versions``: Python, torch, transformers, tokenizers and torch's thread count;
- ``random-llama OUT CONFIG_JSON SEED``: a randomly initialised ``LlamaForCausalLM`` (the config's fields)
  with a byte-level BPE tokenizer (``tokenizer.json``, as ``tokenizer_config.json`` names its special tokens),
  written by ``save_pretrained`` as a user's folder would be;
- ``decode-server FOLDER DTYPE``: the seconds of ``generate`` (greedy, KV cache, no stop) of a batch of equal
  prompts to its first new token and from there to its last, a round per request on stdin (``PeerDecoder``);
- ``greedy FOLDER REQUEST_JSON``: each prompt's greedy continuation, alone (batch 1).

Nothing here imports torch at module level: the project's tests import every bench script.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PEER_DIR = Path(__file__).resolve().parent / ".hf-peer"
PEER_PYTHON = PEER_DIR / "bin" / "python"
# torch 2.14.1 lies on this machine's disk (pip takes it from there); transformers 5 from the registry
PEER_REQUIREMENTS = ("torch==2.14.1", "transformers>=5,<6")
# the text the random model's tokenizer learns its merges from (its vocabulary is padded to the model's)
TOKENIZER_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Grouped-query attention shares each key and value head between several query heads.",
    "A model brought in from elsewhere still speaks its own tokens, one at a time.",
] * 20
SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>")


# --- the project's side ---------------------------------------------------------------------------------
def ensure_peer() -> Path:
    """The peer venv's Python, the venv made first where it is missing (once, a few minutes)."""
    if not PEER_PYTHON.exists():
        print(f"making the peer venv {PEER_DIR} ({', '.join(PEER_REQUIREMENTS)})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_DIR)], check=True)
        subprocess.run([str(PEER_PYTHON), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    return PEER_PYTHON


def peer(command: str, *args: str) -> Any:
    """Run one of this file's commands in the peer venv; its JSON answer."""
    done = subprocess.run(
        [str(ensure_peer()), __file__, command, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Hugging Face peer failed on {command}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class PeerDecoder:
    """transformers' ``generate`` kept loaded in a peer process (``decode-server``), so that its rounds can
    alternate with ours: a busy minute of the shared machine then hits both."""

    def __init__(self, folder: Path, dtype: str):
        command = [str(ensure_peer()), __file__, "decode-server", str(folder), dtype]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer()  # loaded

    def round(self, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
        """Seconds of one generate to its first new token and from there to the last of ``new_tokens``,
        and torch's thread count."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"prompts": prompts, "new_tokens": new_tokens}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the Hugging Face peer ended (exit {self.process.wait()}); its stderr is above"
            )
        return json.loads(line)

    def __enter__(self) -> PeerDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def imported_random_llama(hf_config: dict[str, Any], work: Path, seed: int = 0) -> tuple[Path, Path]:
    """A random ``LlamaForCausalLM`` of ``hf_config``'s shape made by transformers (``work/hf``), and that
    folder brought in with import-hf as a run (``work/run``)."""
    from marin_pipelines.train.import_hf import import_hf, read_hf_folder

    fields = {k: v for k, v in hf_config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    peer("random-llama", str(work / "hf"), json.dumps(fields), str(seed))
    import_hf(read_hf_folder(work / "hf"), work / "run")
    return work / "hf", work / "run"


# --- the peer's side (run by the peer venv's Python) ----------------------------------------------------
def versions() -> dict[str, Any]:
    import platform

    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def random_llama(out: str, config_json: str, seed: str) -> dict[str, Any]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TOKENIZER_TEXT, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(  # BOS first, as Llama 3's
        single=f"{SPECIALS[0]} $A", special_tokens=[(SPECIALS[0], 0)]
    )
    bos, eos = (tokenizer.token_to_id(s) for s in SPECIALS)
    config = LlamaConfig(**json.loads(config_json), bos_token_id=bos, eos_token_id=eos)
    torch.manual_seed(int(seed))
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=SPECIALS[0], eos_token=SPECIALS[1])
    fast.save_pretrained(out)
    return {"folder": out, "parameters": sum(p.numel() for p in model.parameters())}


def _load(folder: str, dtype: str = "float32") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model.eval()
    model.generation_config.eos_token_id = None  # no stop: every row makes all its tokens, as ours do
    model.generation_config.pad_token_id = 0
    return model


def _generate(model: Any, ids: list[list[int]], new_tokens: int, streamer: Any = None) -> list[list[int]]:
    import torch

    tokens = torch.tensor(ids)
    with torch.inference_mode():
        out = model.generate(
            tokens,
            attention_mask=torch.ones_like(tokens),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            streamer=streamer,
        )
    return out[:, tokens.shape[1] :].tolist()


class _Clock:
    """A streamer that notes when ``generate`` hands over each step's tokens (the first call: the prompt)."""

    def __init__(self) -> None:
        self.start, self.times = time.perf_counter(), []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass

    def seconds(self) -> dict[str, float]:
        """Seconds to the first new token, and from it to the last."""
        first, last = self.times[1], self.times[-1]
        return {"first_token_seconds": first - self.start, "decode_seconds": last - first}


def decode_server(folder: str, dtype: str) -> None:
    """Answers requests on stdin, one JSON line each (prompts of equal lengths, one batch; new_tokens), with
    the seconds of one ``generate`` to its first new token and from there to its last. The first request of
    a shape warms up and picks torch's thread count: the faster of 1 and all cores (on this shared 2-core
    machine two OpenMP threads spin at their barriers while the other core is taken: ``generate`` was up to
    8x slower)."""
    import os

    import torch

    model = _load(folder, dtype)
    print(json.dumps({"ready": True}), flush=True)
    seen: set[tuple[int, int]] = set()
    for line in sys.stdin:
        request = json.loads(line)
        prompts, new_tokens = request["prompts"], request["new_tokens"]

        def timed(count: int, prompts: list = prompts) -> dict[str, float]:
            clock = _Clock()
            _generate(model, prompts, count, clock)
            return clock.seconds()

        if (shape := (len(prompts), len(prompts[0]))) not in seen:
            seen.add(shape)
            trial = {}
            for threads in sorted({1, os.cpu_count() or 1}):
                torch.set_num_threads(threads)
                timed(8)  # warm-up
                trial[threads] = min(timed(8)["decode_seconds"] for _ in range(2))
            torch.set_num_threads(min(trial, key=trial.__getitem__))
        print(json.dumps({**timed(new_tokens), "threads": torch.get_num_threads()}), flush=True)


def greedy(folder: str, request_json: str) -> dict[str, Any]:
    """``request``: texts (tokenized here, to say whether HF's tokenizer gives our ids), ids, new_tokens."""
    from transformers import AutoTokenizer

    request = json.loads(request_json)
    model = _load(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = []
    for text, ids in zip(request["texts"], request["ids"], strict=True):
        tokens = _generate(model, [ids], request["new_tokens"])[0]
        own_ids = tokenizer(text)["input_ids"]
        out.append({"tokens": tokens, "text": tokenizer.decode(tokens), "own_ids": own_ids})
    return {"completions": out}


COMMANDS = {
    "versions": versions,
    "random-llama": random_llama,
    "decode-server": decode_server,
    "greedy": greedy,
}


def main() -> None:
    command, *args = sys.argv[1:]
    answer = COMMANDS[command](*args)
    if answer is not None:
        print(json.dumps(answer))


if __name__ == "__main__":
    main()
