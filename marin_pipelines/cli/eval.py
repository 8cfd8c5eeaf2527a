"""`marin-pipelines eval --checkpoint DIR --out FILE.json`: lm-eval tasks and bits per byte of any checkpoint.

The JSON is lm-eval's (``results``, ``configs``, ``versions``, ...) with a ``bpb`` section: one entry per
``--bpb`` set (named ``NAME=`` or by its file or folder name) and ``overall``; and with ``--chat`` a
``chat`` section: the loss per assistant token of each held-out chat set, with what was read and skipped.
With ``--chat-tasks`` the lm-eval tasks' prompts go through the chat template too (a fine-tuned chat model;
generation tasks then answer as the assistant), and the JSON records the template (``chat_template``,
``chat_template_sha``). The template is ``--chat-template``'s file, else the checkpoint directory's own
``chat_template.jinja`` (written by ``sft``), else marin-pipelines' default.
This is also what the launchers run for the ``eval_results`` assets (``python -m marin_pipelines.cli eval
--step-config FILE``, the evaluation in one JSON file: ``EvalLaunch``): under Dagster Pipes it sends its
progress lines to the orchestrator and a summary as a custom message.

The checkpoint, the tokenizer, token caches among the ``--bpb`` sets and ``--out`` may each be a local
path or a ``gs://`` URL.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from marin_pipelines.cli.outputs import check_file, held
from marin_pipelines.cli.step_config import add_step_config, step_config
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS

if TYPE_CHECKING:
    from marin_pipelines.evals.launch_config import EvalLaunch


def bpb_set(text: str) -> tuple[str, list[str]]:
    """``NAME=PATH[,PATH...]`` (one named set of several files / folders / caches) or ``PATH``."""
    name, named, paths = text.partition("=")
    if named and name and "/" not in name:
        return name, [p for p in paths.split(",") if p]
    return Path(text.rstrip("/")).name, [text]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a training directory on lm-eval tasks and bits-per-byte sets"
    )
    parser.add_argument("--checkpoint", help="a directory (or URL) written by training")
    parser.add_argument(
        "--tasks",
        type=lambda text: [t for t in text.split(",") if t],
        default=[],
        help=f"comma-separated lm-eval task names (the shipped ones: {', '.join(SHIPPED_TASKS)})",
    )
    parser.add_argument(
        "--include-path", type=Path, action="append", default=[], help="a folder of further task YAMLs"
    )
    parser.add_argument(
        "--bpb",
        nargs="+",
        type=bpb_set,
        default=[],
        help="bits-per-byte sets: text files / folders (.txt, .jsonl, .parquet) or token caches (their "
        "validation split), each PATH (named by its file name) or NAME=PATH[,PATH...]",
    )
    parser.add_argument(
        "--chat",
        nargs="+",
        type=bpb_set,
        default=[],
        help='held-out chat sets: JSON-lines files of {"messages": [...]}, each PATH or NAME=PATH[,PATH...]; '
        'their loss per assistant token goes into the results\' "chat" section',
    )
    parser.add_argument(
        "--chat-template",
        type=Path,
        help="a Jinja chat template file for --chat and --chat-tasks (default: the checkpoint directory's "
        "chat_template.jinja if it has one, else marin-pipelines' own)",
    )
    parser.add_argument(
        "--chat-tasks",
        action="store_true",
        help="run the --tasks through the chat template, for a fine-tuned chat model",
    )
    parser.add_argument(
        "--tokenizer",
        help="tokenizer.json, a path or URL (default: the one training copied into the checkpoint, or its "
        "parent's)",
    )
    parser.add_argument(
        "--batch-size", type=int, help="sequences per forward pass (default: EVAL_BATCH_SIZE)"
    )
    parser.add_argument("--limit", type=int, help="at most this many documents per task")
    parser.add_argument(
        "--served",
        action="store_true",
        help="ask the --tasks of the checkpoint behind `marin-pipelines serve` (a child on a free local "
        "port) through lm-eval's local-completions (local-chat-completions with --chat-tasks: generative "
        "tasks only)",
    )
    parser.add_argument("--out", help="where to write the results (JSON): a path or URL")
    add_step_config(parser, ("checkpoint", "out"))
    parser.set_defaults(run=run)


def eval_launch(args: argparse.Namespace) -> EvalLaunch:
    """The evaluation ``--step-config`` holds, or the one the flags describe."""
    from marin_pipelines.evals.checkpoint_eval import EvalConfig
    from marin_pipelines.evals.launch_config import EvalLaunch

    if file := step_config(args):
        return EvalLaunch.read(file)
    if not args.tasks and not args.bpb and not args.chat:
        raise ValueError("nothing to evaluate: give --tasks, --bpb and/or --chat")
    if args.chat_tasks and not args.tasks:
        raise ValueError("--chat-tasks runs --tasks through the chat template: give --tasks")
    if args.served and (args.tokenizer or args.chat_template):
        raise ValueError(
            "--served asks the run as `serve` serves it, with its own tokenizer and chat template: "
            "drop --tokenizer / --chat-template"
        )
    for flag, sets in (("--bpb", args.bpb), ("--chat", args.chat)):
        names = [name for name, _ in sets]
        if len(set(names)) < len(names):
            raise ValueError(f"{flag} sets need distinct names, got {names}")
    evals = EvalConfig(
        tasks=args.tasks,
        include_paths=[str(p) for p in args.include_path],
        limit=args.limit,
        chat=dict(args.chat),
        chat_tasks=args.chat_tasks,
        served=args.served,
    )
    return EvalLaunch(
        checkpoint=args.checkpoint,
        tokenizer=args.tokenizer,
        bpb=dict(args.bpb),
        evals=evals,
        chat_template=args.chat_template.read_text() if args.chat_template else None,
        out=args.out,
        **({"batch_size": args.batch_size} if args.batch_size is not None else {}),
    )


def run(args: argparse.Namespace) -> int:
    from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

    from marin_pipelines.evals.checkpoint_eval import results_table, scores
    from marin_pipelines.evals.launched import evaluate_launched, summary_message

    launch = eval_launch(args)
    check_file(launch.out)
    with ExitStack() as stack:  # under Pipes, an error is reported to the orchestrator before it is raised
        stack.enter_context(held(launch.out, "eval"))  # a second evaluation into the file waits for this one
        pipes = (
            stack.enter_context(open_dagster_pipes())
            if PipesEnvVarParamsLoader().is_dagster_pipes_process()
            else None
        )
        progress = pipes.log.info if pipes else lambda line: print(line, file=sys.stderr)
        results = evaluate_launched(launch, progress)
        if pipes:  # the orchestrator shows the table; the terminal of a local run stays readable
            pipes.report_custom_message(summary_message(results))
        else:
            print(results_table(scores(results)))
    return 0
