"""The HTTP server (Starlette on uvicorn) over one engine loop: the OpenAI routes, the tokenizer routes
lm-eval's ``local-completions`` asks a server for (vLLM's ``/tokenizer_info``, ``/tokenize``,
``/detokenize``), and ``/health``.

Every request passes one gate first: the API key, when the server has one (401 otherwise, on every
route), and the drain (503 once SIGTERM came). The gate counts what is in flight, and writes one log line
per request: the route, the status, the time, token counts and why each choice ended; never a prompt's
text, nor the key.

SIGTERM (or Ctrl-C) drains: new requests get 503, the ones in flight run to their end, then the server
exits with status 0. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from marin_pipelines.inference.engine import Completion, Pending, QueueFull, TokenLogprob
from marin_pipelines.inference.sampling import SamplingParams
from marin_pipelines.serving.engine_loop import EngineFailed, EngineLoop
from marin_pipelines.serving.openai_api import (
    BadRequest,
    ChatRequest,
    CompletionRequest,
    chat_logprobs,
    completion_logprobs,
    envelope,
    error_body,
    kept_tokens,
    new_id,
    parse,
    usage,
)
from marin_pipelines.train.trained_run import TrainedRun

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 1  # what a 503 for a full queue asks the client to wait


def error_response(error: BadRequest, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(str(error), error.kind, error.param), error.status, headers=headers)


@dataclass
class ServerState:
    """What the gate and the uvicorn server share: draining after SIGTERM, and requests in flight."""

    draining: bool = False
    in_flight: int = 0


class Gate:
    """ASGI middleware before every route: the API key, the drain, the count in flight, the log line."""

    def __init__(self, app: ASGIApp, state: ServerState, api_key: str | None):
        self.app, self.state = app, state
        self._key = f"Bearer {api_key}".encode() if api_key else None

    def _authorized(self, scope: Scope) -> bool:
        given = dict(scope["headers"]).get(b"authorization", b"")
        return self._key is None or secrets.compare_digest(given, self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        app = self.app
        if not self._authorized(scope):
            app = error_response(
                BadRequest(
                    "a valid API key is needed: Authorization: Bearer KEY",
                    status=401,
                    kind="authentication_error",
                )
            )
        elif self.state.draining:
            app = error_response(BadRequest("the server is shutting down", status=503))
        self.state.in_flight += 1
        try:
            await app(scope, receive, sending)
        finally:
            self.state.in_flight -= 1
            note = scope.get("state", {}).get("note", "")
            client = "{}:{}".format(*scope["client"]) if scope.get("client") else "-"
            log.info(
                "%s %s %d %.3fs %s %s",
                scope["method"],
                scope["path"],
                status[0],
                time.perf_counter() - started,
                client,
                note,
            )


class Generation:
    """The prompts of one HTTP request in the engine, seen from the event loop: an event for each settled
    piece of text (when streamed) and one when a prompt ends."""

    def __init__(self, loop: EngineLoop, prompts: Sequence[list[int]], params: SamplingParams, stream: bool):
        self.loop = loop
        self.aio = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
        self.pending: list[Pending] = []
        try:
            for index, prompt in enumerate(prompts):
                on_text = partial(self._put, index) if stream else None
                self.pending.append(loop.submit(prompt, params, partial(self._put, index, None), on_text))
        except BaseException:
            self.cancel()
            raise

    def _put(self, index: int, piece: str | None) -> None:
        """From the engine's thread: a piece of text of prompt ``index``, or None when it ended."""
        with contextlib.suppress(RuntimeError):  # the event loop has closed (the server stopped at once)
            self.aio.call_soon_threadsafe(self.queue.put_nowait, (index, piece))

    async def events(self) -> AsyncIterator[tuple[int, str | None]]:
        remaining = len(self.pending)
        while remaining:
            index, piece = await self.queue.get()
            remaining -= piece is None
            yield index, piece

    def completion(self, index: int) -> Completion:
        pending = self.pending[index]
        if not pending.done.is_set() or pending.completion is None:
            raise BadRequest("the engine failed; see the server's log", status=500)
        return pending.completion

    async def completions(self, request: Request) -> list[Completion] | None:
        """Every prompt's completion; None (and the prompts cancelled) if the client goes first."""
        ending = asyncio.ensure_future(self._drain())
        leaving = asyncio.ensure_future(_disconnected(request))
        await asyncio.wait({ending, leaving}, return_when=asyncio.FIRST_COMPLETED)
        leaving.cancel()
        if not ending.done():
            ending.cancel()
            self.cancel()
            return None
        return [self.completion(i) for i in range(len(self.pending))]

    async def _drain(self) -> None:
        async for _ in self.events():
            pass

    def cancel(self) -> None:
        for pending in self.pending:
            if not pending.done.is_set():
                self.loop.cancel(pending)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def _note(completions: Sequence[Completion]) -> str:
    """The log line's account of a request's choices: counts and reasons, never text."""
    counts = usage(list(completions))
    cut = sum(c.truncated for c in completions)
    first = [c.first_token_seconds for c in completions if c.first_token_seconds is not None]
    return " ".join(
        [
            f"prompts={len(completions)}",
            f"prompt_tokens={counts['prompt_tokens']}",
            f"completion_tokens={counts['completion_tokens']}",
            *([f"cut_prompt_tokens={cut}"] if cut else []),
            f"finish={','.join(c.finish_reason or 'error' for c in completions)}",
            *([f"first_token={min(first):.3f}s"] if first else []),
        ]
    )


class OpenAIServer:
    """A loaded run behind the OpenAI routes, named ``name`` to its clients, generating through ``loop``."""

    def __init__(
        self,
        run: TrainedRun,
        loop: EngineLoop,
        name: str,
        api_key: str | None = None,
        state: ServerState | None = None,
    ):
        self.run, self.loop, self.name = run, loop, name
        self.engine = loop.engine
        self.chat = run.chat()  # built once: it copies the tokenizer
        self.state = state or ServerState()
        routes = [
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/tokenizer_info", self.tokenizer_info),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
        ]
        handlers = {BadRequest: self._refused, QueueFull: self._refused, EngineFailed: self._refused}
        self.app: ASGIApp = Gate(Starlette(routes=routes, exception_handlers=handlers), self.state, api_key)

    # --- routes ------------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.loop.failure is not None:
            raise EngineFailed("the engine failed; see the server's log")
        busy = sum(p is not None for p in self.engine.busy)
        return JSONResponse(
            {"status": "ok", "model": self.name, "busy_slots": busy, "waiting": self.engine.waiting.qsize()}
        )

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "marin-pipelines",
            "max_model_len": self.engine.max_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(self, request: Request) -> Response:
        body: CompletionRequest = parse(CompletionRequest, await _json(request))
        self._check_model(body.model)
        if body.stream and body.logprobs is not None:
            raise BadRequest("logprobs: not served with stream; ask without stream", "logprobs")
        # a text prompt begins with the run's BOS, as training read text; its echo is the text's own tokens,
        # the first scored on the BOS (what an in-process evaluation scores); token ids are taken as given
        texts, prompts, added = [], [], []
        for given in body.prompts():
            if isinstance(given, str):
                texts.append(given)
                prompts.append(self.run.encode(given))
                added.append(1)
            else:
                self._check_ids(given, "prompt")
                texts.append(self.run.tokenizer.decode(given, skip_special_tokens=False))
                prompts.append(given)
                added.append(0)
        self._check_max_tokens(body.max_tokens, "max_tokens")
        scored = body.echo and body.logprobs is not None
        if scored and (longest := max(map(len, prompts))) + body.max_tokens > self.engine.max_len:
            raise BadRequest(
                f"prompt: {longest} tokens and max_tokens {body.max_tokens} exceed the context of "
                f"{self.engine.max_len} tokens (echo with logprobs scores the whole prompt)",
                "prompt",
            )
        params = body.sampling(body.max_tokens, body.logprobs or 0)
        generation = Generation(self.loop, prompts, params, body.stream)
        request_id = new_id("cmpl")
        if body.stream:
            echoed = texts if body.echo else None
            return self._stream(request, generation, request_id, "text_completion", body, echoed)
        try:
            scores = await asyncio.gather(*[self._score(p) for p in prompts]) if scored else None
        except BaseException:
            generation.cancel()
            raise
        completions = await generation.completions(request)
        if completions is None:
            return self._gone(request)
        choices = []
        for index, done in enumerate(completions):
            choice = {
                "index": index,
                "text": (texts[index] if body.echo else "") + done.text,
                "logprobs": None,
                "finish_reason": done.finish_reason,
            }
            if body.logprobs is not None:
                tokens = kept_tokens(self.run.tokenizer, done)
                echoed = scores[index][added[index] :] if scores else []
                choice["logprobs"] = completion_logprobs(
                    self.run.tokenizer, [*echoed, *tokens], first_unscored=bool(echoed) and not added[index]
                )
            choices.append(choice)
        return self._respond(
            request, envelope("text_completion", request_id, self.name, choices), completions
        )

    async def chat_completions(self, request: Request) -> Response:
        body: ChatRequest = parse(ChatRequest, await _json(request))
        self._check_model(body.model)
        messages = [m.as_template_message() for m in body.messages]
        try:
            prompt = self.chat.encode_prompt(messages)
        except Exception as e:  # the template's own refusal, or a Jinja error in rendering
            raise BadRequest(f"messages: the chat template cannot render them: {e}", "messages") from None
        if len(prompt) >= self.engine.max_len:
            raise BadRequest(
                f"messages: {len(prompt)} tokens fill the context of {self.engine.max_len}", "messages"
            )
        given = body.max_completion_tokens or body.max_tokens
        field = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
        max_tokens = given or self.engine.max_len - len(prompt)
        self._check_max_tokens(max_tokens, field)
        if body.stream and body.logprobs:
            raise BadRequest("logprobs: not served with stream; ask without stream", "logprobs")
        top = (body.top_logprobs or 0) if body.logprobs else 0
        generation = Generation(self.loop, [prompt], body.sampling(max_tokens, top), body.stream)
        request_id = new_id("chatcmpl")
        if body.stream:
            return self._stream(request, generation, request_id, "chat.completion.chunk", body, None)
        completions = await generation.completions(request)
        if completions is None:
            return self._gone(request)
        done = completions[0]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": done.text},
            "logprobs": chat_logprobs(self.run.tokenizer, kept_tokens(self.run.tokenizer, done))
            if body.logprobs
            else None,
            "finish_reason": done.finish_reason,
        }
        return self._respond(
            request, envelope("chat.completion", request_id, self.name, [choice]), completions
        )

    async def tokenizer_info(self, request: Request) -> Response:
        """What lm-eval's remote tokenizer reads (``eos_token`` tells it the server has these routes)."""
        return JSONResponse(
            {
                "tokenizer_class": "marin-pipelines",
                "bos_token": self.run.specials.bos,
                "eos_token": self.run.specials.eos,
                "pad_token": None,
                "chat_template": self.chat.source,
                "model_max_length": self.engine.max_len,
            }
        )

    async def tokenize(self, request: Request) -> Response:
        """vLLM's ``/tokenize``: special tokens' strings read as the special tokens (as a Hugging Face
        tokenizer reads them, so that lm-eval finds the EOS id); ``add_special_tokens`` (true unless
        false) puts the run's BOS first, as a prompt's text is encoded."""
        body = await _json(request)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise BadRequest("prompt: a string to tokenize", "prompt")
        tokens = self.chat.tokenizer.encode(body["prompt"], add_special_tokens=False).ids
        if body.get("add_special_tokens", True):
            tokens = [self.run.ids.bos, *tokens]
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": self.engine.max_len})

    async def detokenize(self, request: Request) -> Response:
        body = await _json(request)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise BadRequest("tokens: a list of token ids", "tokens")
        self._check_ids(tokens, "tokens")
        return JSONResponse({"prompt": self.run.tokenizer.decode(tokens)})

    # --- helpers -----------------------------------------------------------------------------------
    def _check_model(self, model: str) -> None:
        if model != self.name:
            raise BadRequest(
                f"model: this server serves {self.name!r}", "model", status=404, kind="not_found_error"
            )

    def _check_ids(self, tokens: list[int], field: str) -> None:
        vocab = self.engine.config.vocab_size
        if bad := [t for t in tokens if not 0 <= t < vocab]:
            raise BadRequest(f"{field}: token ids {bad[:5]} are outside the vocabulary [0, {vocab})", field)

    def _check_max_tokens(self, max_tokens: int, field: str) -> None:
        if max_tokens >= self.engine.max_len:
            raise BadRequest(
                f"{field}: {max_tokens} leaves no room for a prompt in the context of "
                f"{self.engine.max_len} tokens",
                field,
            )

    async def _score(self, prompt: list[int]) -> list[TokenLogprob]:
        scored, _ = await asyncio.wrap_future(self.loop.call(partial(self.engine.score, prompt)))
        return scored

    def _respond(self, request: Request, body: dict[str, Any], completions: list[Completion]) -> Response:
        body["usage"] = usage(completions)
        if cut := sum(c.truncated for c in completions):
            body["usage"]["truncated_prompt_tokens"] = cut
        request.state.note = _note(completions)
        return JSONResponse(body)

    def _gone(self, request: Request) -> Response:
        request.state.note = "finish=cancelled (the client left)"
        return Response(status_code=499)  # nginx's "client closed request": for the log, nobody reads it

    def _stream(
        self,
        request: Request,
        generation: Generation,
        request_id: str,
        kind: str,
        body: CompletionRequest | ChatRequest,
        echoed: list[str] | None,
    ) -> Response:
        chat = kind == "chat.completion.chunk"

        def chunk(index: int, text: str | None = None, finish: str | None = None, role: bool = False) -> str:
            if chat:
                delta = {"role": "assistant", "content": ""} if role else {"content": text} if text else {}
                choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
            return sse(envelope(kind, request_id, self.name, [choice]))

        async def events() -> AsyncIterator[str]:
            try:
                if chat:
                    yield chunk(0, role=True)
                for index, text in enumerate(echoed or []):
                    yield chunk(index, text)
                async for index, piece in generation.events():
                    if piece is not None:
                        yield chunk(index, piece)
                        continue
                    try:
                        finish = generation.completion(index).finish_reason
                    except BadRequest as e:  # the engine failed
                        yield sse(error_body(str(e), e.kind))
                        return
                    yield chunk(index, finish=finish)
                completions = [generation.completion(i) for i in range(len(generation.pending))]
                if body.stream_options is not None and body.stream_options.include_usage:
                    yield sse(envelope(kind, request_id, self.name, [], usage=usage(completions)))
                yield sse("[DONE]")
                request.state.note = _note(completions)
            finally:  # the client went away (the task is cancelled) or the stream ended: nothing left runs
                generation.cancel()
                if not hasattr(request.state, "note"):
                    request.state.note = "finish=cancelled (the client left)"

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    async def _refused(self, request: Request, error: Exception) -> Response:
        if isinstance(error, QueueFull):
            request.state.note = "error=queue_full"
            busy = BadRequest(f"the queue is full ({error}); retry later", status=503)
            return error_response(busy, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        if isinstance(error, EngineFailed):
            request.state.note = "error=engine_failed"
            return error_response(BadRequest(str(error), status=503))
        assert isinstance(error, BadRequest)
        request.state.note = f"error={error.param or error.status}"
        return error_response(error)


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not JSON: {e}") from None


class DrainingServer(uvicorn.Server):
    """uvicorn, whose SIGTERM drains (``ServerState.draining``: the gate answers 503) until nothing is in
    flight, then stops, and does not raise the signal again afterwards as uvicorn does (which would end the
    process by the signal, not with status 0)."""

    def __init__(self, config: uvicorn.Config, state: ServerState):
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.state.draining and sig == signal.SIGINT:  # a second Ctrl-C: now
            self.should_exit = self.force_exit = True
        if not self.state.draining:
            log.info(
                "%s: refusing new requests, finishing %d in flight",
                signal.Signals(sig).name,
                self.state.in_flight,
            )
        self.state.draining = True

    async def on_tick(self, counter: int) -> bool:
        if self.state.draining and self.state.in_flight == 0:
            self.should_exit = True
        return await super().on_tick(counter)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: a free port, read back from the socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def run_server(
    server: OpenAIServer, sock: socket.socket, on_ready: Callable[[], None] = lambda: None
) -> None:
    """Serve on ``sock`` until SIGTERM or Ctrl-C has drained the requests in flight; the engine loop runs
    for as long."""
    config = uvicorn.Config(server.app, log_level="warning", access_log=False, lifespan="off")
    uvicorn_server = DrainingServer(config, server.state)
    server.loop.start()
    try:
        on_ready()
        uvicorn_server.run(sockets=[sock])
    finally:
        server.loop.stop()
