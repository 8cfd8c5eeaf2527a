"""Fixtures every tier shares: real web data from ../shared/data beside the project (when present), the
Cloud Storage emulator, and the tiny pipeline's store, built once per test run however many workers run."""

import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiers import check_and_order

from marin_pipelines.train.compilation_cache import compilation_cache_env, default_compilation_cache

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real web data not found at {SHARED_DATA}")
    return SHARED_DATA


# XLA compiles each program once on this machine, in this process and in every child: the launcher's cache
# folder (LocalLauncher.compilation_cache, the user's), which `make demo` and other clones share. A machine's
# first `make test` compiles ~1,700 programs (65 of them training steps): 2.1 of its minutes
for _name, _value in compilation_cache_env(default_compilation_cache()).items():
    os.environ.setdefault(_name, _value)
# The tests' models are tiny and compiling is much of their time: XLA's backend optimisation at level 1 of 3
# (a nano run without a cache, 3 runs each: 2 steps 6.3 -> 4.6 s, 202 steps 7.9 -> 7.5 s; level 0 compiles
# faster, 3.9 s, but runs slower, 9.4 s). Every process of the tests inherits it, launched children
# included; what they check does not depend on it
LIGHT_OPTIMISATION = "--xla_backend_optimization_level=1"
if LIGHT_OPTIMISATION not in os.environ.get("XLA_FLAGS", "").split():
    os.environ["XLA_FLAGS"] = " ".join([*os.environ.get("XLA_FLAGS", "").split(), LIGHT_OPTIMISATION])

# No wandb run for every training process of the tests (starting one costs 3 s: its service and its imports,
# ~50 training processes a run). The tests of tracking ask for it, offline: tests/unit/train/test_tracking.py,
# and tests/system/test_secrets.py with the project's default (no WANDB_MODE set)
os.environ["WANDB_MODE"] = "disabled"

# gcsfs reads this when imported: its default asks a gRPC control API for the bucket type, which the
# emulator below does not speak (each call would wait 60 s for it)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
EMULATOR_BUCKET = "marin-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _GenerationProxy(BaseHTTPRequestHandler):
    """Cloud Storage's generation preconditions, in front of the emulator, which ignores them.

    tensorstore (under orbax) re-reads an OCDBT manifest with ``ifGenerationNotMatch`` and expects 304, or
    200 with an ``x-goog-generation`` header, and commits it with ``ifGenerationMatch``; real buckets do
    both. Everything else is passed through unchanged to the same emulator that gcsfs talks to.
    """

    upstream = ""  # host:port of the emulator
    one_at_a_time = threading.Lock()
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        target = _object_of(url.path, query, body)
        conditional = target and ("ifGenerationMatch" in query or "ifGenerationNotMatch" in query)
        with self.one_at_a_time if conditional else contextlib.nullcontext():  # check and write: one step
            generation = self._generation(*target) if target else None
            if generation is not None:
                if query.get("ifGenerationMatch", [generation])[0] != generation:
                    return self._reply(412, {}, b"")
                if query.get("ifGenerationNotMatch", [None])[0] == generation:
                    return self._reply(304 if self.command == "GET" else 412, {}, b"")
            status, headers, data = self._upstream(self.command, self.path, body, dict(self.headers))
        if generation not in (None, "0") and self.command == "GET" and status in (200, 206):
            headers["x-goog-generation"] = generation
        self._reply(status, headers, data)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _upstream(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            connection.request(method, path, body=body or None, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def _generation(self, bucket: str, name: str) -> str:
        """The object's current generation, "0" when it does not exist (the API's convention)."""
        quoted = urllib.parse.quote(name, safe="")
        status, _, data = self._upstream("GET", f"/storage/v1/b/{bucket}/o/{quoted}")
        return json.loads(data)["generation"] if status == 200 else "0"

    def _reply(self, status: int, headers: dict, data: bytes) -> None:
        self.send_response(status)
        hop_by_hop = {"connection", "transfer-encoding", "keep-alive", "content-length", "server", "date"}
        for key, value in headers.items():
            if key.lower() not in hop_by_hop:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _object_of(path: str, query: dict[str, list[str]], body: bytes = b"") -> tuple[str, str] | None:
    """(bucket, object name) that a JSON-API request is about, or None (listings, buckets). A multipart
    upload (gcsfs) names its object in the body's JSON part."""
    parts = path.split("/")
    if path.startswith("/upload/storage/v1/b/"):
        if "name" in query:
            return parts[5], query["name"][0]
        named = re.search(rb'"name": ("(?:[^"\\]|\\.)*")', body)
        return (parts[5], json.loads(named.group(1))) if named else None
    for prefix in ("/storage/v1/b/", "/download/storage/v1/b/"):
        if path.startswith(prefix):
            rest = path[len(prefix) :].split("/", 2)
            if len(rest) == 3 and rest[1] == "o" and rest[2]:
                return rest[0], urllib.parse.unquote(rest[2])
    return None


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A child killed mid-request drops its connections: expected here, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.hookimpl(trylast=True)  # after each tier folder's conftest has marked its tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    check_and_order(items)


@pytest.fixture(scope="session")
def demo_crawl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The default demo crawl (its folder and its stats), built once for the crawl, text and command tests."""
    from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl

    out = tmp_path_factory.mktemp("demo-crawl")
    return out, build_demo_crawl(out, DemoCrawlConfig())


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A local Cloud Storage server (the JSON API), as gcsfs, tensorstore and orbax reach a real bucket;
    tensorstore goes through ``_GenerationProxy``, which adds the generation preconditions it relies on.

    Its address goes into this process's environment, so launched children (training, evaluation) find
    it too. Yields the address.
    """
    port = _free_port()
    address = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gcp-storage-emulator")),
            "start",
            "--host=127.0.0.1",
            f"--port={port}",
            "--in-memory",
            f"--default-bucket={EMULATOR_BUCKET}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("GCS_EMULATOR_LOG", os.devnull), "w"),  # noqa: SIM115
    )
    handler = type("Proxy", (_GenerationProxy,), {"upstream": f"127.0.0.1:{port}"})
    proxy = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    env = {
        "STORAGE_EMULATOR_HOST": address,  # gcsfs
        "TENSORSTORE_GCS_HTTP_URL": f"http://127.0.0.1:{proxy.server_address[1]}",  # tensorstore (orbax)
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore: no credentials lookup
        "NO_GCE_CHECK": "true",  # google-auth: no metadata-server probe
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{address}/storage/v1/b/{EMULATOR_BUCKET}", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the Cloud Storage emulator did not start")
        yield address
    finally:
        proxy.shutdown()
        proxy.server_close()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a loaded machine at the session's end: no graceful exit
            server.kill()
            server.wait()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def gcs_root(gcs_emulator: str) -> str:
    """A fresh ``gs://`` prefix on the emulator for one test."""
    return f"gs://{EMULATOR_BUCKET}/{uuid.uuid4().hex[:8]}"


def run_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder of this test run that every pytest-xdist worker shares (each worker's own temporary
    folders are under one folder of the run)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory) -> str:
    """A store holding the tiny pipeline (tests/tiny_pipeline.py), crawl to evaluation, materialised once per
    test run: tests that declare the same steps reuse them (by version, whatever the steps' names). Workers
    share the store: the first to need a step builds it under the step's lease, the others wait and reuse
    it, as two runs of one experiment do."""
    from dagster import DagsterInstance
    from tiny_pipeline import tiny_experiment

    from marin_pipelines.defs.local_run import materialize_experiment

    root = str(run_folder(tmp_path_factory, "tiny-store"))
    materialize_experiment(tiny_experiment(), root, DagsterInstance.ephemeral())
    return root


TINY_WORDS = ["river", "stone", "paper", "light", "garden", "window", "market", "winter", "music", "letter"]


def write_tiny_cache(folder: Path) -> Path:
    from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
    from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(TINY_WORDS, size=int(rng.integers(20, 80)))) for _ in range(300)]
    docs = folder / "docs"
    docs.mkdir(parents=True)
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(300)], "text": texts}), docs / "documents-0.parquet"
    )
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=300))
    cache = folder / "cache"
    cache.mkdir()
    build_cache([str(docs)], tokenizer, cache, CacheConfig(validation_fraction=0.1), folder / "work")
    return cache


@pytest.fixture(scope="session")
def token_cache(tmp_path_factory) -> Path:
    """A small token cache built the way the pipeline builds one, for the command line's and the launchers'
    tests (each worker builds its own: a second of work)."""
    return write_tiny_cache(tmp_path_factory.mktemp("token_cache"))
