"""The served run through real HTTP: a uvicorn server on a free local port in a thread, the `openai` package
and httpx as clients, lm-eval's own API models parsing the answers. Against the engine and the full forward
pass: greedy text, streamed text, log-probabilities and echo. Bad requests, the queue limit, the API key and a
client that leaves are checked on their own servers. (SIGTERM, which needs a process: tests/system.)"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import openai
import pytest
import uvicorn
from flax import nnx

from marin_pipelines.inference.engine import Engine
from marin_pipelines.inference.sampling import SamplingParams
from marin_pipelines.serving.engine_loop import EngineFailed, EngineLoop
from marin_pipelines.serving.server import OpenAIServer, listen
from marin_pipelines.tokenize.tokenizer import (
    RUN_MADE_HERE,
    TokenizerConfig,
    special_token_ids,
    train_tokenizer,
)
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.trained_run import TrainedRun

TEXT = ["the quick brown fox jumps over the lazy dog; " * 3, "pack my box with five dozen liquor jugs. " * 3]
TOKENIZER = train_tokenizer(TEXT, TokenizerConfig(vocab_size=300, min_frequency=1))
VOCAB = TOKENIZER.get_vocab_size()
CONTEXT = 64
MODEL = LlamaConfig(
    vocab_size=VOCAB, seq_len=CONTEXT, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64
)
NAME = "tiny"
KEY = "sk-test-0123456789abcdef"  # the API key of the key test: it must never show anywhere
GREEDY = {"model": NAME, "temperature": 0}


def tiny_run() -> TrainedRun:
    return TrainedRun(
        NAME,
        Llama(MODEL, nnx.Rngs(0)),
        TOKENIZER,
        RUN_MADE_HERE,
        special_token_ids(TOKENIZER, RUN_MADE_HERE),
        None,
    )


RUN = tiny_run()
# the expected answers: an engine of its own (a served engine is stepped by its loop's thread alone)
REFERENCE = Engine(RUN.model, TOKENIZER, stop_tokens=RUN.ids.stop, slots=4)


class Served:
    """An OpenAIServer on a free port of 127.0.0.1, uvicorn in a thread; its engine loop started unless
    ``start_loop`` is False (a test then turns it by hand)."""

    def __init__(self, server: OpenAIServer, start_loop: bool = True):
        self.server, self.engine, self.loop = server, server.engine, server.loop
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(server.app, log_level="warning", access_log=False, lifespan="off")
        self.uvicorn = uvicorn.Server(config)
        if start_loop:
            server.loop.start()
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_for(lambda: self.uvicorn.started)

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0, timeout=120)

    def post(self, path: str, body: dict, **kwargs) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=120, **kwargs)

    def stop(self) -> None:
        self.uvicorn.should_exit = self.uvicorn.force_exit = True  # a failed test's requests may hang
        self.thread.join()
        self.server.loop.stop()


def wait_for(condition, what: str = "the condition") -> None:
    """Wait until ``condition()`` holds (a bound on the wait, never on the result)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        time.sleep(0.01)


@contextmanager
def serving(start_loop: bool = True, api_key: str | None = None, **engine_options) -> Iterator[Served]:
    """A served RUN on an engine of its own (``engine_options``: the run's stop tokens unless given)."""
    engine = Engine(RUN.model, TOKENIZER, **{"stop_tokens": RUN.ids.stop, **engine_options})
    server = Served(OpenAIServer(RUN, EngineLoop(engine), NAME, api_key=api_key), start_loop)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def live() -> Iterator[Served]:
    with serving(slots=4) as server:
        yield server


def ends_cancelled_at_the_next_step(server: Served, pending) -> None:
    wait_for(lambda: pending.cancelled, "the server to notice the client left")
    server.loop.turn()
    assert pending.completion.finish_reason == "cancelled" and len(pending.completion.tokens) < 40
    assert server.engine.idle()


def full_logprobs(tokens: list[int]) -> np.ndarray:
    """log p(token t | tokens before), by the full forward pass: [len - 1] entries."""
    logits = jax.nn.log_softmax(RUN.model(jnp.asarray([tokens])))[0]
    return np.array([float(logits[i, t]) for i, t in enumerate(tokens[1:])])


def engine_text(prompt: list[int], **settings) -> str:
    return REFERENCE.generate([prompt], SamplingParams(**settings))[0].text


def test_models_and_health_answer(live):
    client = live.client()
    assert [m.id for m in client.models.list().data] == [NAME]
    health = httpx.get(f"{live.url}/health").json()
    assert health["status"] == "ok" and health["model"] == NAME


def test_completions_give_the_engines_greedy_text_for_text_and_token_prompts(live):
    client = live.client()
    texts = ["the quick", "pack my box"]
    prompts = [RUN.encode(text) for text in texts]  # the run's BOS first
    alone = REFERENCE.generate(prompts, SamplingParams(max_new_tokens=9))
    for given in (texts, prompts, texts[0], prompts[0]):
        answer = client.completions.create(model=NAME, prompt=given, max_tokens=9, temperature=0)
        expected = alone[: len(answer.choices)]
        assert [c.text for c in answer.choices] == [c.text for c in expected]
        assert [c.index for c in answer.choices] == list(range(len(expected)))
        assert [c.finish_reason for c in answer.choices] == [c.finish_reason for c in expected]
        assert answer.usage.prompt_tokens == sum(c.prompt_tokens for c in expected)
        assert answer.usage.completion_tokens == sum(len(c.tokens) for c in expected)


def test_chat_completions_go_through_the_runs_chat_template(live):
    messages = [{"role": "user", "content": "the quick brown fox"}]
    answer = live.client().chat.completions.create(model=NAME, messages=messages, max_tokens=7, temperature=0)
    prompt = RUN.encode_chat(messages)
    assert answer.choices[0].message.content == engine_text(prompt, max_new_tokens=7)
    assert answer.choices[0].message.role == "assistant" and answer.usage.prompt_tokens == len(prompt)


def test_a_stream_joins_to_the_unstreamed_text_and_ends_with_done(live):
    body = {**GREEDY, "prompt": ["the quick", "pack my"], "max_tokens": 12}
    whole = live.post("/v1/completions", body).json()
    with httpx.stream("POST", f"{live.url}/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for choice in whole["choices"]:
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == choice["index"]]
        assert "".join(c["text"] for c in mine) == choice["text"]
        assert [c["finish_reason"] for c in mine][-1] == choice["finish_reason"]

    messages = [{"role": "user", "content": "pack my box"}]
    client = live.client()
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(
        model=NAME,
        messages=messages,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = list(stream)
    assert (
        "".join(p.choices[0].delta.content or "" for p in pieces if p.choices)
        == chat.choices[0].message.content
    )
    assert (
        pieces[0].choices[0].delta.role == "assistant"
        and pieces[-1].usage.total_tokens == chat.usage.total_tokens
    )


def test_generated_logprobs_are_the_full_forward_passes_with_their_alternatives(live):
    prompt = RUN.encode("lazy dog; the")
    answer = live.post("/v1/completions", {**GREEDY, "prompt": prompt, "max_tokens": 6, "logprobs": 2}).json()
    choice = answer["choices"][0]
    done = REFERENCE.generate([prompt], SamplingParams(max_new_tokens=6))[0]
    expected = full_logprobs(prompt + done.tokens)[len(prompt) - 1 :]
    logprobs = choice["logprobs"]
    np.testing.assert_allclose(logprobs["token_logprobs"], expected, rtol=1e-5, atol=1e-5)
    assert logprobs["tokens"] == [TOKENIZER.decode([t]) for t in done.tokens]
    listed = zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True)
    for token, logprob, top in listed:
        assert token in top and top[token] == logprob and len(top) <= 3
        assert max(top.values()) == logprob  # greedy: the token is the likeliest
    assert logprobs["text_offset"] == list(np.cumsum([0] + [len(t) for t in logprobs["tokens"][:-1]]))


def test_echo_with_no_new_tokens_scores_the_prompt_as_the_engine_and_the_forward_pass_do(live):
    """A text prompt is read after the run's BOS, as training read text: its echo is the text's own tokens,
    the first scored on the BOS (what an in-process evaluation scores). Token ids are taken as given: the
    first has nothing before it."""
    prompt = "pack my box with five dozen"
    tokens = RUN.encode(prompt)  # the BOS, then the text's tokens
    scored, _ = REFERENCE.score(tokens)
    for given, echoed, first in ((prompt, tokens[1:], 1), (tokens, tokens, 0)):
        answer = live.post(
            "/v1/completions", {**GREEDY, "prompt": given, "max_tokens": 0, "echo": True, "logprobs": 1}
        )
        choice = answer.json()["choices"][0]
        logprobs = choice["logprobs"]
        assert logprobs["tokens"] == [TOKENIZER.decode([t], skip_special_tokens=False) for t in echoed]
        assert (logprobs["token_logprobs"][0] is None) == (first == 0)
        assert logprobs["token_logprobs"][1 - first :] == [s.logprob for s in scored[1:]]  # the same floats
        np.testing.assert_allclose(
            logprobs["token_logprobs"][1 - first :], full_logprobs(tokens), rtol=1e-5, atol=1e-5
        )
        assert answer.json()["usage"]["completion_tokens"] == 0
    assert choice["text"] == TOKENIZER.decode(tokens, skip_special_tokens=False)


def test_lm_evals_local_completions_scores_and_generates_through_the_server(live):
    """lm-eval's own request building and parsing (LocalCompletionsAPI, its remote tokenizer on our
    /tokenize, found by itself): log-likelihoods equal the full forward pass over the tokens it sent,
    greedy flags its argmax, generations the engine's."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    # its default tokenizer backend ("auto") finds the server's tokenizer routes
    lm = LocalCompletionsAPI(base_url=f"{live.url}/v1/completions", model=NAME, max_length=CONTEXT)
    assert lm.tokenizer_backend == "remote"
    pairs = [("the quick brown", " fox jumps"), ("pack my box with", " five dozen liquor")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    results = lm.loglikelihood(requests, disable_tqdm=True)
    encode = RUN.chat().tokenizer.encode  # what /tokenize does: no BOS unless asked
    for (context, continuation), (logprob, greedy) in zip(pairs, results, strict=True):
        whole = encode(context + continuation, add_special_tokens=False).ids
        n = len(encode(context, add_special_tokens=False).ids)
        full = full_logprobs(whole)[n - 1 :]
        assert logprob == pytest.approx(full.sum(), abs=1e-4)
        logits = RUN.model(jnp.asarray([whole]))[0]
        argmax = [int(jnp.argmax(logits[i])) for i in range(n - 1, len(whole) - 1)]
        assert greedy == (argmax == whole[n:])

    until = {"until": ["\n\n"], "max_gen_toks": 6, "do_sample": False}
    generated = lm.generate_until([Instance("generate_until", {}, ("the lazy", until), 0)], disable_tqdm=True)
    prompt = encode("the lazy", add_special_tokens=False).ids
    assert generated == [engine_text(prompt, max_new_tokens=6, stop=("\n\n",))]


def test_lm_evals_local_chat_completions_payload_is_served_and_parsed(live):
    from lm_eval.models.openai_completions import LocalChatCompletion

    lm = LocalChatCompletion(base_url=f"{live.url}/v1/chat/completions", model=NAME)
    messages = [{"role": "user", "content": "the quick brown"}]
    payload = lm._create_payload(messages, generate=True, gen_kwargs={"until": ["\n\n"], "max_gen_toks": 5})
    answer = live.post("/v1/chat/completions", payload)
    prompt = RUN.encode_chat(messages)
    assert lm.parse_generations(answer.json()) == [engine_text(prompt, max_new_tokens=5, stop=("\n\n",))]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/completions", {"prompt": "a", "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {"prompt": "a", "n": 2}, 400, "n"),
        ("/v1/completions", {"prompt": "a", "best_of": 3}, 400, "best_of"),
        ("/v1/completions", {"prompt": "a", "frobnicate": 1}, 400, "frobnicate"),
        ("/v1/completions", {"prompt": []}, 400, "prompt"),
        ("/v1/completions", {"prompt": [1, "a"]}, 400, "prompt"),
        ("/v1/completions", {"prompt": [[1], [VOCAB]]}, 400, "prompt"),
        ("/v1/completions", {"prompt": "a", "max_tokens": CONTEXT}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "a", "logprobs": 6}, 400, "logprobs"),
        ("/v1/completions", {"prompt": "a", "logprobs": 1, "stream": True}, 400, "logprobs"),
        ("/v1/completions", {"prompt": "a", "seed": -1}, 400, "seed"),
        (
            "/v1/completions",
            {"prompt": [1] * 60, "echo": True, "logprobs": 0, "max_tokens": 5},
            400,
            "prompt",
        ),
        ("/v1/completions", {"prompt": "a", "model": "other"}, 404, "model"),
        ("/v1/completions", {"max_tokens": 1}, 400, "prompt"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_tokens": 0},
            400,
            "max_tokens",
        ),
        ("/tokenize", {"text": "a"}, 400, "prompt"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(live, path, body, status, param):
    answer = live.post(path, {"model": NAME, **body})
    error = answer.json()["error"]
    assert answer.status_code == status and error["param"] == param
    assert error["message"].startswith(param) and error["type"] in (
        "invalid_request_error",
        "not_found_error",
    )


def test_a_body_that_is_not_json_is_a_400(live):
    answer = httpx.post(f"{live.url}/v1/completions", content=b"{not json", timeout=60)
    assert answer.status_code == 400 and "not JSON" in answer.json()["error"]["message"]


def test_the_tokenizer_routes_lm_eval_asks_for(live):
    info = httpx.get(f"{live.url}/tokenizer_info").json()
    assert info["eos_token"] == RUN.specials.eos and info["model_max_length"] == CONTEXT
    plain = live.post("/tokenize", {"prompt": "the quick", "add_special_tokens": False}).json()["tokens"]
    assert plain == RUN.encode("the quick")[1:]
    assert live.post("/tokenize", {"prompt": "the quick"}).json()["tokens"] == RUN.encode("the quick")
    assert live.post("/tokenize", {"prompt": RUN.specials.eos, "add_special_tokens": False}).json()[
        "tokens"
    ] == [RUN.ids.eos]
    assert live.post("/detokenize", {"tokens": plain}).json()["prompt"] == "the quick"


def test_a_full_queue_is_a_503_with_retry_after():
    """The loop is not started, so a first request waits in a queue of one; the second finds it full."""
    with serving(start_loop=False, max_waiting=1) as server:
        body = {**GREEDY, "prompt": "the quick", "max_tokens": 3}
        first: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: first.append(server.post("/v1/completions", body)))
        waiting.start()
        wait_for(lambda: server.engine.waiting.qsize() == 1, "the first request to queue")
        refused = server.post("/v1/completions", body)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "queue is full" in refused.json()["error"]["message"]
        server.loop.start()
        waiting.join()
        assert first[0].status_code == 200 and first[0].json()["choices"][0]["finish_reason"]


def test_a_client_that_leaves_mid_stream_cancels_its_request():
    """The loop is turned by hand: a stream's first piece, the client gone, its request ends as cancelled
    at the next step, long before its max_tokens (no stop token: it would run to 40)."""
    with serving(start_loop=False, stop_tokens=(), slots=2) as server:
        got_piece, leave = threading.Event(), threading.Event()

        def client() -> None:
            body = {**GREEDY, "prompt": "the quick", "max_tokens": 40, "stream": True}
            with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                        got_piece.set()
                        leave.wait()
                        return

        thread = threading.Thread(target=client)
        thread.start()
        while not got_piece.is_set():
            server.loop.turn()
            time.sleep(0.01)
        pending = next(p for p in server.engine.busy if p is not None)
        leave.set()
        thread.join()
        ends_cancelled_at_the_next_step(server, pending)


def test_a_client_that_leaves_before_its_answer_cancels_its_request():
    """Not streamed: the request sent over a bare socket, which is closed once the request decodes."""
    with serving(start_loop=False, stop_tokens=(), slots=2) as server:
        body = json.dumps({**GREEDY, "prompt": "the quick", "max_tokens": 40}).encode()
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            wait_for(lambda: server.engine.waiting.qsize() == 1, "the request to queue")
            server.loop.turn()  # prefilled: its first token
            pending = next(p for p in server.engine.busy if p is not None)
        ends_cancelled_at_the_next_step(server, pending)


def test_the_api_key_is_asked_on_every_route_and_never_written(caplog, capfd):
    caplog.set_level(logging.INFO, logger="marin_pipelines.serving")
    bodies = []
    with serving(api_key=KEY) as server:
        routes = [
            ("GET", "/health"),
            ("GET", "/v1/models"),
            ("POST", "/v1/completions"),
            ("POST", "/v1/chat/completions"),
            ("GET", "/tokenizer_info"),
            ("POST", "/tokenize"),
            ("POST", "/detokenize"),
        ]
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                answer = httpx.request(method, server.url + path, json={}, headers=headers, timeout=60)
                assert answer.status_code == 401, (path, headers)
                assert answer.json()["error"]["type"] == "authentication_error"
                bodies.append(answer.text)
        with pytest.raises(openai.AuthenticationError):
            server.client("wrong").models.list()
        client = server.client(KEY)
        assert client.models.list().data[0].id == NAME
        answer = client.completions.create(model=NAME, prompt="the", max_tokens=2, temperature=0)
        bodies.append(answer.model_dump_json())
        bad = server.post(
            "/v1/completions",
            {"model": NAME, "prompt": KEY, "n": 3},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert bad.status_code == 400
    out, err = capfd.readouterr()
    assert "POST /v1/completions 200" in caplog.text and "POST /v1/completions 401" in caplog.text
    for text in (caplog.text, out, err, *bodies):
        assert KEY not in text


def test_the_log_has_one_line_a_request_and_no_prompt_text(live, caplog):
    caplog.set_level(logging.INFO, logger="marin_pipelines.serving")
    secret_prompt = "pack my box with five"
    live.post("/v1/completions", {**GREEDY, "prompt": secret_prompt, "max_tokens": 3})
    live.post("/v1/completions", {**GREEDY, "prompt": secret_prompt, "temperature": 9})
    lines = [r.getMessage() for r in caplog.records if r.name == "marin_pipelines.serving.server"]
    assert len(lines) == 2 and "POST /v1/completions 200" in lines[0] and "prompt_tokens=" in lines[0]
    assert "POST /v1/completions 400" in lines[1] and "error=temperature" in lines[1]
    assert not any(secret_prompt in line for line in lines)


def test_a_failing_engine_step_ends_the_loop_and_refuses_what_follows():
    """A seed the engine cannot hold (past uint32: the server refuses it at the door) raises in its step."""
    engine = Engine(RUN.model, TOKENIZER, stop_tokens=RUN.ids.stop)
    loop = EngineLoop(engine)
    ended = threading.Event()
    loop.start()
    try:
        pending = loop.submit(RUN.encode("a"), SamplingParams(max_new_tokens=3, seed=-1), ended.set)
        assert ended.wait(60) and not pending.done.is_set() and loop.failure is not None
        with pytest.raises(EngineFailed):
            loop.submit(RUN.encode("a"), SamplingParams(max_new_tokens=3), ended.set)
    finally:
        loop.stop()
