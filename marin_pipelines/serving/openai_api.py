"""The OpenAI API's requests and responses, as far as a served run speaks it: legacy completions (with
``echo`` and ``logprobs``, what lm-eval's ``local-completions`` scores with), chat completions (what its
``local-chat-completions`` sends), their server-sent-event chunks, and the error shape.

Requests are validated here, so that a bad one is a 400 naming its field. Fields the API has and a served
run cannot honour are taken only at their neutral value (``n`` 1, penalties 0, no ``logit_bias``); a field
the API does not have is refused by name. ``top_k`` is vLLM's extension, taken as vLLM takes it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from tokenizers import Tokenizer

from marin_pipelines.config_errors import field_problems
from marin_pipelines.inference.engine import Completion, TokenLogprob
from marin_pipelines.inference.sampling import TOP_LOGPROBS, SamplingParams

SEED_LIMIT = 1 << 32  # the engine draws from a uint32 seed


class BadRequest(ValueError):
    """A request the server refuses: an HTTP status, the field at fault (None: the request as a whole)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str | None = None):
        super().__init__(message)
        self.param, self.status = param, status
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class SamplingFields(BaseModel):
    """What both endpoints take. Defaults are OpenAI's (temperature 1: sampled)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, description="vLLM's: the k likeliest tokens; -1 or 0: all")
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Literal[1] = 1
    presence_penalty: Literal[0] = 0
    frequency_penalty: Literal[0] = 0
    logit_bias: dict[str, float] | None = Field(None, max_length=0)
    user: str | None = None  # the caller's end user, for their own records: not used

    def sampling(self, max_new_tokens: int, logprobs: int) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            stop=tuple(s for s in stops if s),
            seed=self.seed,
            logprobs=logprobs,
        )


class CompletionRequest(SamplingFields):
    """``/v1/completions``: ``prompt`` is a string, a list of strings, a list of token ids or a list of
    lists of token ids; each is a choice of its own, in order."""

    prompt: Any
    max_tokens: int = Field(16, ge=0)
    logprobs: int | None = Field(None, ge=0, le=TOP_LOGPROBS)
    echo: bool = False
    best_of: Literal[1] | None = None
    suffix: None = None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            if all(isinstance(p, str) for p in value) or all(_token_ids(p) for p in value):
                return value
            if _token_ids(value):
                return value
        raise ValueError(
            "a string, a list of strings, a list of token ids or a list of lists of token ids (none empty)"
        )

    def prompts(self) -> list[str | list[int]]:
        if isinstance(self.prompt, str) or _token_ids(self.prompt):
            return [self.prompt]
        return list(self.prompt)


def _token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


class ChatMessage(BaseModel):
    """A turn: ``content`` a string or a list of text parts (``{"type": "text", "text": ...}``), joined."""

    model_config = ConfigDict(extra="forbid")

    role: str
    content: Any
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in value
        ):
            return "".join(p["text"] for p in value)
        raise ValueError('a string or a list of text parts ({"type": "text", "text": "..."})')

    def as_template_message(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class ChatRequest(SamplingFields):
    """``/v1/chat/completions``: the conversation through the run's chat template, the assistant's turn
    opened. Without ``max_tokens`` (or ``max_completion_tokens``) the answer may fill the context."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=TOP_LOGPROBS)


def parse(model: type[BaseModel], body: Any) -> Any:
    """``body`` as ``model``, or a BadRequest naming the first bad field (all of them in the message)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        problems = field_problems(e, model)
        first = e.errors()[0]["loc"]
        raise BadRequest("; ".join(problems), param=".".join(map(str, first)) or None) from None


# --- responses ---------------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(completions: list[Completion]) -> dict[str, int]:
    """Token counts over every choice: the prompts as the model read them (after any cut) and the
    generated tokens."""
    prompt = sum(c.prompt_tokens for c in completions)
    generated = sum(len(c.tokens) for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def token_text(tokenizer: Tokenizer, token: int) -> str:
    """A token as the logprobs list it: its own text (special tokens by name; a piece of a UTF-8
    character as U+FFFD)."""
    return tokenizer.decode([token], skip_special_tokens=False)


def completion_logprobs(tokenizer: Tokenizer, tokens: list[TokenLogprob], first_unscored: bool) -> dict:
    """OpenAI's legacy ``logprobs``: each token's text, its log-probability and its alternatives (the
    token itself among them); ``first_unscored``: the first token has nothing before it (``echo`` of a
    prompt), its entries null. ``text_offset``: where each token's text starts in the joined texts. Two
    tokens of one text (pieces of UTF-8 characters, both U+FFFD) are one key of ``top_logprobs``, as the
    format allows: the likelier one's."""
    texts, logprobs, tops, offsets, offset = [], [], [], [], 0
    for i, scored in enumerate(tokens):
        text = token_text(tokenizer, scored.token)
        texts.append(text)
        offsets.append(offset)
        offset += len(text)
        if i == 0 and first_unscored:
            logprobs.append(None)
            tops.append(None)
            continue
        logprobs.append(scored.logprob)
        top: dict[str, float] = {}
        for token, logprob in [*scored.top, (scored.token, scored.logprob)]:
            top.setdefault(token_text(tokenizer, token), logprob)  # tokens of one text: the likeliest
        tops.append(top)
    return {"tokens": texts, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(tokenizer: Tokenizer, tokens: list[TokenLogprob]) -> dict:
    """The chat API's ``logprobs``: ``content``, each token with its bytes and its alternatives."""

    def entry(token: int, logprob: float) -> dict:
        text = token_text(tokenizer, token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {
        "content": [
            {**entry(s.token, s.logprob), "top_logprobs": [entry(t, p) for t, p in s.top]} for s in tokens
        ]
    }


def kept_tokens(tokenizer: Tokenizer, done: Completion) -> list[TokenLogprob]:
    """The generated tokens whose text the returned text holds: where a stop string cut the text, the
    tokens that begin past the cut go."""
    if tokenizer.decode(done.tokens) == done.text:
        return done.logprobs
    kept = 0
    while kept < len(done.tokens) and len(tokenizer.decode(done.tokens[:kept])) < len(done.text):
        kept += 1
    return done.logprobs[:kept]


def envelope(kind: str, request_id: str, model: str, choices: list[dict], **rest: Any) -> dict:
    """A response or chunk: ``kind`` is the API's ``object``."""
    return {
        "id": request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **rest,
    }
