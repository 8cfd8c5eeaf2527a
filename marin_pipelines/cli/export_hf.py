"""`marin-pipelines export-hf DIR --out HF_DIR`: a training directory's latest checkpoint as a Hugging Face
model folder (safetensors, config.json and the run's tokenizer.json); prints the config as JSON. Either may be
a URL (gs://)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-hf", help="a checkpoint as a Hugging Face LlamaForCausalLM / Qwen3ForCausalLM folder"
    )
    parser.add_argument("dir", help="a directory (or URL) written by `marin-pipelines train`")
    parser.add_argument("--out", required=True, help="the Hugging Face model folder (or URL) to write")
    parser.set_defaults(run=lambda args: export(args.dir, args.out))


def export(train_dir: str, out_dir: str) -> int:
    from marin_pipelines.train.export import export_hf

    print(json.dumps(export_hf(train_dir, out_dir), indent=2))
    return 0
