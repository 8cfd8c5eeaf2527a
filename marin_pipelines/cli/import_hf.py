"""`marin-pipelines import-hf HF_FOLDER --out RUN`: a local Hugging Face LlamaForCausalLM / Qwen3ForCausalLM
folder (config.json, safetensors, tokenizer.json, its special tokens and chat template) as a run folder that
`eval`, `sft`, `export-hf`, `checkpoint-info` and `train --warm-start` take (``train/import_hf.py``); prints
the run's summary as JSON. Everything is checked before anything is written: what the model cannot take is
one line naming it. ``--out`` is a new or empty local folder; it appears whole, by a rename, or not at all."""

from __future__ import annotations

import argparse

from marin_pipelines.cli import print_json
from marin_pipelines.cli.outputs import new_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import-hf",
        help="a Hugging Face Llama / Qwen3 model folder as a run folder (the reverse of export-hf)",
    )
    parser.add_argument("hf_folder", help="a local Hugging Face model folder")
    parser.add_argument("--out", required=True, help="the run folder to write: new or empty")
    parser.set_defaults(run=lambda args: import_folder(args.hf_folder, args.out))


def import_folder(hf_folder: str, out: str) -> int:
    from marin_pipelines.train.import_hf import import_hf, read_hf_folder

    model = read_hf_folder(hf_folder)  # refused before anything is written
    with new_folder(out, "import-hf", [str(model.folder)]) as work:
        summary = import_hf(model, work)
    print_json(summary, indent=2)
    return 0
