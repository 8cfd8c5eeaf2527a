"""`marin-pipelines tokenize`: text files into a token cache; a JSON summary on the last line."""

from __future__ import annotations

import argparse
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from marin_pipelines.cli import print_json
from marin_pipelines.cli.engine_flags import add_engine_arguments, engine_from
from marin_pipelines.cli.outputs import check_folder, held, naming

if TYPE_CHECKING:
    from pydantic import BaseModel

    from marin_pipelines.tokenize.tokenized_cache import CacheBuild

T = TypeVar("T", bound="BaseModel")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tokenize", help="tokenize .txt / .jsonl / .parquet text into a token cache"
    )
    parser.add_argument(
        "--input", nargs="+", required=True, metavar="PATH", help="files or folders, local or fsspec URLs"
    )
    parser.add_argument("--out", required=True, help="the cache folder to create (it must not exist)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--tokenizer", help="a tokenizer.json that has the <|endoftext|> token")
    which.add_argument("--vocab-size", type=int, help="train a byte-level BPE of this size on the input")
    parser.add_argument("--validation-fraction", type=float, default=0.05, help="share of validation docs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the id hash that assigns splits")
    add_engine_arguments(parser)
    parser.set_defaults(run=run_tokenize)


def run_tokenize(args: argparse.Namespace) -> int:
    started = time.time()
    out = Path(args.out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; a cache is written to a new folder")
    check_folder(str(out.parent), "--out")
    with held(str(out), "tokenize"):  # two commands never build into one work folder
        if out.exists():  # built by the command this one waited for
            raise ValueError(
                f"--out {out} was made meanwhile by another command; a cache is written to a new folder"
            )
        with naming(str(out)):
            build = _build(args, out)
    splits = build.info["splits"]
    summary = {
        "out": str(out),
        "documents": sum(s["documents"] for s in splits.values()),
        "tokens": sum(s["tokens"] for s in splits.values()),
        "shards": sum(len(s["shards"]) for s in splits.values()),
        "vocab_size": build.info["vocab_size"],
        **{f"{name}_{key}": s[key] for name, s in splits.items() for key in ("documents", "tokens")},
        "chunks_reused": build.chunks_reused,
        "seconds": round(time.time() - started, 2),
    }
    print_json(summary)
    return 0


def _build(args: argparse.Namespace, out: Path) -> CacheBuild:
    """The cache of ``args.input`` built beside ``out`` and renamed into place."""
    from marin_pipelines.tokenize.text_sources import read_chunk, text_chunks
    from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
    from marin_pipelines.tokenize.tokenizer import NoText, TokenizerConfig, load_tokenizer, train_tokenizer

    config = flags_config(CacheConfig, validation_fraction=args.validation_fraction, seed=args.seed)
    if args.tokenizer:
        tokenizer = load_tokenizer(args.tokenizer)
    else:
        sizes = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
        tokenizer_config = flags_config(TokenizerConfig, **sizes)
        texts = (text for chunk in text_chunks(args.input) for _, text in read_chunk(chunk))
        try:
            tokenizer = train_tokenizer(texts, tokenizer_config)
        except NoText as e:
            raise ValueError(f"--input {' '.join(args.input)}: {e}") from None
    # built beside --out and renamed into place; finished chunks wait in the work folder after a kill
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        build = build_cache(
            args.input, tokenizer, tmp, config, out.with_name(f".{out.name}.work"), engine_from(args)
        )
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return build


def flags_config(model: type[T], **fields: object) -> T:
    """``model`` from command-line values; a bad one is an error naming its flag and what is allowed."""
    from pydantic import ValidationError

    from marin_pipelines.config_errors import field_problems

    try:
        return model(**fields)
    except ValidationError as e:
        flags = []
        for problem in field_problems(e):
            name, rest = problem.split(":", 1)
            flags.append(f"--{name.replace('_', '-')}:{rest}")
        raise ValueError("; ".join(flags)) from None
