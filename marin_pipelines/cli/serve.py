"""`marin-pipelines serve RUN [--host 127.0.0.1] [--port N]`: a run (trained, fine-tuned or imported) behind
an OpenAI-compatible HTTP server: /v1/completions (echo and logprobs included), /v1/chat/completions
through the run's chat template, streaming, /v1/models and /health. It binds 127.0.0.1 unless --host says
otherwise; with --api-key-env NAME every route asks for the key held in that environment variable."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import PurePosixPath


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="an OpenAI-compatible HTTP server for a run")
    parser.add_argument("run_dir", metavar="RUN", help="a run folder (or URL): trained, fine-tuned, imported")
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="0: a free port, printed (default 8000)")
    parser.add_argument("--name", help="the model's name to clients (default: the run folder's name)")
    parser.add_argument("--slots", type=int, default=8, help="requests decoded together (default 8)")
    parser.add_argument(
        "--max-waiting", type=int, default=256, help="requests queued for a slot before 503 (default 256)"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="ask every request for the key in this environment variable (never given on the command line)",
    )
    parser.add_argument("--tokenizer", help="a tokenizer.json (default: the run's)")
    parser.set_defaults(run=serve)


def serve(args: argparse.Namespace) -> int:
    if args.slots < 1 or args.max_waiting < 1:
        raise ValueError("--slots and --max-waiting must be at least 1")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ValueError(f"--api-key-env: the environment variable {args.api_key_env} is not set")
    from marin_pipelines.inference.engine import Engine
    from marin_pipelines.inference.sampling import SamplingParams
    from marin_pipelines.serving.engine_loop import EngineLoop
    from marin_pipelines.serving.server import OpenAIServer, listen, run_server
    from marin_pipelines.train.trained_run import load_run

    log = logging.getLogger("marin_pipelines.serving")  # one line a request, on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # whatever configured the root logger (JAX's absl) does not print it twice
    sock = listen(args.host, args.port)  # first: a port in use fails before the model loads
    run = load_run(args.run_dir, args.tokenizer)
    engine = Engine.for_run(run, slots=args.slots, max_waiting=args.max_waiting)
    # a prefill and a decode step compiled before the first client (a new prompt shape still compiles)
    engine.generate([[run.ids.bos]], SamplingParams(max_new_tokens=2))
    name = args.name or PurePosixPath(str(args.run_dir).rstrip("/")).name
    server = OpenAIServer(run, EngineLoop(engine), name, api_key)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def ready() -> None:
        config = engine.config
        template = "the run's" if run.chat_template else "the default"
        print(
            f"marin-pipelines serve: {args.run_dir} as model {name!r} on {url}\n"
            f"  {config.num_params():,} parameters (total with embeddings), vocabulary {config.vocab_size}, "
            f"chat template: {template}\n"
            f"  slots {engine.slots}, queue {args.max_waiting}, context {engine.max_len} tokens, "
            f"API key: {'from $' + args.api_key_env if api_key else 'none'}\n"
            "  routes: /v1/models /v1/completions /v1/chat/completions /health "
            "/tokenizer_info /tokenize /detokenize",
            file=sys.stderr,
            flush=True,
        )

    run_server(server, sock, ready)
    return 0
