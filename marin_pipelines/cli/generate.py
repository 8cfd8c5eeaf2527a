"""`marin-pipelines generate RUN --prompt TEXT | --prompts FILE.jsonl`: text from a run (trained, fine-tuned
or imported), one JSON line per prompt in the prompts' order: the text, the generated token ids, why it
stopped, and timing. Lines of the file are ``{"prompt": "..."}`` or, for a chat model,
``{"messages": [{"role": "user", "content": "..."}]}``; ``--chat`` sends each ``--prompt`` as a user turn
through the run's chat template."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from marin_pipelines.cli import print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "generate", help="text from a run: greedy or sampled, one JSON line a prompt"
    )
    parser.add_argument("run_dir", metavar="RUN", help="a run folder (or URL): trained, fine-tuned, imported")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    given.add_argument(
        "--prompts", type=Path, help='a JSON-lines file: {"prompt": ...} or {"messages": [...]}'
    )
    parser.add_argument(
        "--chat", action="store_true", help="each --prompt as a user turn, through the chat template"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0: no cut")
    parser.add_argument("--stop", action="append", default=[], help="text that ends a generation (repeat)")
    parser.add_argument("--seed", type=int, help="the sampling seed of every prompt (default: fresh)")
    parser.add_argument("--slots", type=int, default=8, help="requests decoded together")
    parser.add_argument("--tokenizer", help="a tokenizer.json (default: the run's)")
    parser.set_defaults(run=generate)


def read_prompts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each prompt as ``{"prompt": text}`` or ``{"messages": [...]}``; a bad line is an error naming it."""
    if args.prompt is not None:
        key = "messages" if args.chat else "prompt"
        return [{key: [{"role": "user", "content": p}] if args.chat else p} for p in args.prompt]
    prompts = []
    for number, line in enumerate(args.prompts.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{args.prompts}:{number}: not JSON ({e.msg})") from None
        if not isinstance(item, dict) or not (isinstance(item.get("prompt"), str) or _messages(item)):
            raise ValueError(
                f'{args.prompts}:{number}: expected {{"prompt": "..."}} or {{"messages": [...]}}'
            )
        prompts.append(item)
    if not prompts:
        raise ValueError(f"{args.prompts}: no prompts")
    return prompts


def _messages(item: dict[str, Any]) -> bool:
    messages = item.get("messages")
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    )


def generate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from marin_pipelines.config_errors import describe
    from marin_pipelines.inference.engine import Engine, QueueFull
    from marin_pipelines.inference.sampling import SamplingParams
    from marin_pipelines.train.trained_run import load_run

    prompts = read_prompts(args)
    try:
        settings = SamplingParams(
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            stop=tuple(args.stop),
            seed=args.seed,
        )
    except ValidationError as e:
        raise ValueError(describe(e, SamplingParams, "generation settings")) from None
    run = load_run(args.run_dir, args.tokenizer)
    engine = Engine.for_run(run, slots=args.slots)
    encoded = [
        run.encode_chat(p["messages"]) if "messages" in p else run.encode(p["prompt"]) for p in prompts
    ]
    pending, printed = [], 0
    for tokens in encoded:
        while True:
            try:
                pending.append(engine.submit(tokens, settings))
                break
            except QueueFull:
                engine.step()
    while printed < len(pending):
        engine.step()
        while printed < len(pending) and pending[printed].done.is_set():
            done = pending[printed].completion
            if done.truncated:
                print(
                    f"prompt {printed}: its first {done.truncated} tokens were cut to fit the context "
                    f"of {engine.max_len} with {settings.max_new_tokens} new tokens",
                    file=sys.stderr,
                )
            print_json(
                {
                    "index": printed,
                    "text": done.text,
                    "tokens": done.tokens,
                    "finish_reason": done.finish_reason,
                    "prompt_tokens": done.prompt_tokens,
                    "truncated_prompt_tokens": done.truncated,
                    "seed": done.seed,
                    "first_token_seconds": round(done.first_token_seconds or 0.0, 4),
                    "seconds": round(done.seconds, 4),
                }
            )
            printed += 1
    return 0
