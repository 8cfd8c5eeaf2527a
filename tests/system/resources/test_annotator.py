"""The production annotator against a real chat-completions server on localhost, started by the test.

Each document carries a marker that tells the server how to misbehave: 429 with Retry-After, 500s,
answers slower than the client's timeout, garbage content, a body that is not JSON, a refusal.
"""

import json
import logging
import re
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dagster import DagsterInstance
from test_datashop_end_to_end import (  # tests/ is on sys.path (tests/conftest.py)
    DATASHOP,
    materialize_data_part,
    tiny,
)

from marin_pipelines.quality.annotation import (
    AnnotationError,
    AnswerCache,
    ChatAnnotator,
    ChatSettings,
    DatashopConfig,
)
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.annotator import CACHE_FILE, AnnotatorResource
from marin_pipelines.resources.store import ArtifactStoreResource

SECRET = "sk-test-d0-not-leak-7f3a9"
MODEL = "test-model"
CONFIG = DatashopConfig(rubric="Rate this.\n{document}\nAnswer with Score: N.", annotator=MODEL)


class ChatServer:
    """A chat-completions endpoint whose behaviour per document is set by the marker in the prompt."""

    def __init__(self, slow_s: float = 2.0):
        self.slow_s = slow_s
        self.attempts: Counter[str] = Counter()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.auth: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(), bind_and_activate=False)
        self.httpd.daemon_threads = True
        self.httpd.request_queue_size = 64  # the default backlog of 5 refuses bursts of connections
        self.httpd.server_bind()
        self.httpd.server_activate()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def requests(self) -> int:
        return sum(self.attempts.values())

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/v1/chat/completions" and body["model"] == MODEL
                prompt = body["messages"][0]["content"]
                doc = re.search(r"<(\w+)>", prompt).group(1)
                with server.lock:
                    server.attempts[doc] += 1
                    attempt = server.attempts[doc]
                    server.times[doc].append(time.monotonic())
                    server.auth.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(doc, attempt)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up on a slow answer
                    pass
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, doc: str, attempt: int):
                kind = doc.split("_")[0]
                if kind == "r429" and attempt == 1:
                    return self._send(429, b'{"error": "slow down"}', {"Retry-After": "1"})
                if kind == "r500" and attempt <= 2:
                    return self._send(500, b'{"error": "boom"}')
                if kind == "down":
                    return self._send(503, b'{"error": "unavailable"}')
                if kind == "denied":
                    return self._send(401, json.dumps({"error": f"bad key {SECRET}"}).encode())
                if kind == "badjson":
                    return self._send(200, b"<html>not json</html>")
                if kind == "slow" and attempt == 1:
                    time.sleep(server.slow_s)
                if kind == "busy":
                    time.sleep(0.5)  # long enough to overlap however loaded the machine is
                content = "I would rather not say." if kind == "garbage" else f"Score: {len(doc) % 6}"
                answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, body: bytes, headers: dict | None = None):
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def annotator(server: ChatServer, tmp_path, **settings) -> ChatAnnotator:
    settings = {
        "timeout_s": 0.5,
        "backoff_s": 0.01,
        "max_retries": 3,
        "requests_per_second": 1000,
        **settings,
    }
    return ChatAnnotator(
        ChatSettings(base_url=server.url, model=MODEL, **settings),
        CONFIG,
        AnswerCache(tmp_path / "cache.sqlite"),
        api_key=SECRET,
    )


def expected(doc: str) -> int:
    return len(doc) % 6


def test_retries_429_500_and_timeouts_then_labels(server, tmp_path):
    docs = ["ok_a", "r429_b", "r500_c", "slow_d", "ok_eeeee"]
    result = annotator(server, tmp_path).annotate([f"<{d}>" for d in docs])
    assert result.labels == [expected(d) for d in docs]
    assert server.attempts == {"ok_a": 1, "r429_b": 2, "r500_c": 3, "slow_d": 2, "ok_eeeee": 1}
    assert result.stats["retries"] == 1 + 2 + 1 and result.stats["requests"] == server.requests == 9
    first, second = server.times["r429_b"]
    assert second - first >= 0.9  # Retry-After: 1 was honoured, not the 0.01 s backoff
    assert server.auth == [f"Bearer {SECRET}"] * 9


def test_unparseable_answers_and_dead_documents_are_counted_and_dropped(server, tmp_path):
    docs = ["ok_a", "garbage_b", "badjson_c", "down_d"]
    result = annotator(server, tmp_path, max_retries=2).annotate([f"<{d}>" for d in docs])
    assert result.labels == [expected("ok_a"), None, None, None]
    assert result.stats["unparseable"] == 2 and result.stats["failed"] == 1
    assert result.stats["labelled"] == 1
    assert server.attempts["down_d"] == 3 and server.attempts["garbage_b"] == 1


def test_the_cache_means_a_rerun_pays_nothing(server, tmp_path):
    texts = [f"<ok_{'x' * n}>" for n in range(6)] + ["<garbage_a>"]
    first = annotator(server, tmp_path).annotate(texts)
    assert server.requests == len(texts)
    again = annotator(server, tmp_path).annotate(texts)  # a new process would open the same file
    assert server.requests == len(texts)
    assert again.labels == first.labels and again.stats["cache_hits"] == len(texts)
    assert again.stats["unparseable"] == 1  # a paid-for garbage answer is cached and still dropped
    other_model = ChatAnnotator(
        ChatSettings(base_url=server.url, model="other"), CONFIG, AnswerCache(tmp_path / "cache.sqlite")
    )
    assert other_model.cache.get("other", CONFIG.prompt(texts[0])) is None  # keyed by model too


def test_a_refusal_is_a_clear_error_without_retries_or_the_key(server, tmp_path):
    with pytest.raises(AnnotationError, match="HTTP 401") as error:
        annotator(server, tmp_path).annotate(["<denied_a>"])
    assert SECRET not in str(error.value) and "***" in str(error.value)
    assert server.attempts["denied_a"] == 1


def test_requests_run_concurrently_within_the_rate_limit(server, tmp_path):
    texts = [f"<busy_{'x' * n}>" for n in range(8)]
    annotator(server, tmp_path, max_concurrency=4).annotate(texts)
    assert server.max_in_flight >= 2
    limited = ChatServer()
    try:
        annotator(limited, tmp_path / "other", requests_per_second=10).annotate(
            [f"<ok_{n}>" for n in range(6)]
        )
        starts = sorted(t for times in limited.times.values() for t in times)
        assert starts[-1] - starts[0] >= 0.45  # six starts at 10/s span at least 0.5 s
    finally:
        limited.close()


def test_resource_reads_the_key_from_the_named_variable(server, tmp_path, monkeypatch):
    store = ArtifactStoreResource(root=str(tmp_path))
    resource = AnnotatorResource(store=store, base_url=server.url, api_key_env="TEST_ANNOTATOR_KEY")
    with pytest.raises(ValueError, match=r"\$TEST_ANNOTATOR_KEY, which is not set"):
        resource.annotator(CONFIG)
    monkeypatch.setenv("TEST_ANNOTATOR_KEY", SECRET)
    chat = resource.annotator(CONFIG)
    assert chat.annotate(["<ok_a>"]).labels == [expected("ok_a")]
    assert (tmp_path / CACHE_FILE).is_file() and server.auth == [f"Bearer {SECRET}"]
    assert SECRET not in repr(chat) and SECRET not in chat.describe()
    no_url = AnnotatorResource(store=store, base_url=None)
    with pytest.raises(ValueError, match="MARIN_ANNOTATOR_BASE_URL"):
        no_url.annotator(CONFIG)


def test_the_key_is_in_no_log_metadata_or_cache_of_a_real_run(server, tmp_path, monkeypatch, caplog):
    """The Datashop labels asset, materialised with a chat model behind the local server."""
    monkeypatch.setenv("MARIN_ANNOTATOR_API_KEY", SECRET)
    experiment = tiny(
        name="chat_datashop",
        crawl={"pydoc_modules": ["json", "heapq"], "n_files": 1},
        datashop={**DATASHOP, "annotator": MODEL, "sample_size": 12, "rubric": "<ok_page> {document}"},
    )
    resources = default_resources(str(tmp_path))
    resources["annotator"] = AnnotatorResource(
        store=resources["store"], base_url=server.url, requests_per_second=1000
    )
    instance = DagsterInstance.ephemeral()
    caplog.set_level(logging.DEBUG)
    labels = materialize_data_part(experiment, str(tmp_path), instance, resources, "quality_labels")[
        "quality_labels"
    ]
    assert labels["requests"] == server.requests == labels["documents"] == labels["labelled"] >= 4
    assert "ChatAnnotator" in labels["annotator"] and MODEL in labels["annotator"]
    assert set(server.auth) == {f"Bearer {SECRET}"}  # the key did reach the server
    logs = [record for run in instance.get_runs() for record in instance.all_logs(run.run_id)]
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    with sqlite3.connect(tmp_path / CACHE_FILE) as db:
        cached = repr(db.execute("SELECT * FROM answers").fetchall())
    for place in (str(labels), caplog.text, repr(logs), cached):
        assert SECRET not in place
    assert SECRET.encode() not in stored
