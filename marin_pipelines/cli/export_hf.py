"""`marin-pipelines export-hf DIR --out HF_DIR`: a training directory's latest checkpoint as a Hugging Face
model folder (safetensors, config.json, the run's tokenizer.json and a tokenizer_config.json with the chat
template of a chat model); prints the config as JSON. Either may be a URL (gs://). ``--out`` is new, empty or
an earlier export of the same run (its ``export.json`` says which): any other folder is refused."""

from __future__ import annotations

import argparse
from pathlib import Path

from marin_pipelines.cli import print_json
from marin_pipelines.cli.outputs import check_folder, held


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-hf", help="a checkpoint as a Hugging Face LlamaForCausalLM / Qwen3ForCausalLM folder"
    )
    parser.add_argument("dir", help="a directory (or URL) written by `marin-pipelines train`")
    parser.add_argument(
        "--out",
        required=True,
        help="the Hugging Face model folder (or URL) to write: new, empty or an earlier export of the run",
    )
    parser.add_argument(
        "--chat-template",
        type=Path,
        help="a Jinja chat template for tokenizer_config.json (default: the run's chat_template.jinja)",
    )
    parser.set_defaults(run=lambda args: export(args.dir, args.out, args.chat_template))


def export(train_dir: str, out_dir: str, chat_template: Path | None = None) -> int:
    from marin_pipelines.train.export import export_hf

    template = chat_template.read_text() if chat_template else None
    check_folder(out_dir)
    with held(out_dir, "export-hf"):  # two exports into one folder: one after the other
        print_json(export_hf(train_dir, out_dir, template), indent=2)
    return 0
