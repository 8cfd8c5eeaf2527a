"""`marin-pipelines export-hf DIR --out HF_DIR`: a training directory's latest checkpoint as a Hugging Face
model folder (safetensors, config.json and the run's tokenizer.json); prints the config as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-hf", help="a checkpoint as a Hugging Face LlamaForCausalLM / Qwen3ForCausalLM folder"
    )
    parser.add_argument("dir", type=Path, help="a directory written by `marin-pipelines train`")
    parser.add_argument("--out", type=Path, required=True, help="the Hugging Face model folder to write")
    parser.set_defaults(run=lambda args: export(args.dir, args.out))


def export(train_dir: Path, out_dir: Path) -> int:
    from marin_pipelines.train.export import export_hf

    print(json.dumps(export_hf(train_dir, out_dir), indent=2))
    return 0
