"""Secrets stay in the environment: a whole run, with ``WANDB_API_KEY``, ``MARIN_ANNOTATOR_API_KEY``,
Google credentials (and ``HF_TOKEN``) set to values made up for this test, writes none of them anywhere.

The run is `marin-pipelines experiment` in a child process, as a user runs it, against a Dagster instance
on disk (the project's dagster.yaml: sqlite storage, local compute logs) under the test's folder, with
``HOME``, ``TMPDIR``, the working directory, the store, ``MARIN_CACHE_DIR`` and ``WANDB_DIR`` there too:
crawl and text stages, Datashop labels from a chat model (a local server, which checks that the key was
sent), the classifier, the tokens, a nano model tracked by wandb (offline, the project's default: no
WANDB_MODE is set) and its evaluation. It runs twice: with the store in a folder, then on a bucket (the
Cloud Storage emulator), where gcsfs signs in with the service-account file (a real RSA key; its
token_uri is a local stand-in for Google's token endpoint, whose access token is one more secret).
Then every file under the folder (sqlite databases, compute logs, wandb's offline files, manifests, the
execution record), every object on the bucket and the event log read through the instance are searched
for each secret, raw and encoded (base64 at any alignment, URL-quoted, JSON-escaped). A non-secret canary
variable stands for the rest of the environment: finding it means the environment is dumped somewhere,
a leak waiting for the next variable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster._serdes import serialize_value

NAME = "secrets_probe"
EMULATOR_BUCKET = "marin-test"  # the default bucket of the gcs_emulator fixture (tests/conftest.py)
MODEL = "secrets-test-model"
EXPERIMENT = f'''
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text, evaluate, quality_and_curation, tokenizer_and_cache, train,
)

text = crawl_and_text("{NAME}", demo={{"pydoc_modules": ["json", "heapq", "bisect"], "n_files": 1}})
quality = quality_and_curation(
    "{NAME}",
    text.deduplicated_text,
    datashop={{
        "rubric": "Rate this page from 0 to 5.\\n{{document}}\\nAnswer with Score: N.",
        "annotator": "{MODEL}",
        "sample_size": 12,
        "scale": {{"min": 0, "max": 5, "keep": 3}},
    }},
    quality={{"bucket": 10_000, "epoch": 5}},
    curation={{"top_fraction": 0.5}},
)
tokens = tokenizer_and_cache("{NAME}", quality.curated_text, tokenizer={{"vocab_size": 512}})
run = train(
    "{NAME}/run",
    tokens,
    model={{"size": "nano", "seq_len": 32}},
    train={{"steps": 10, "batch_size": 8, "warmup_steps": 2, "log_every": 5, "checkpoint_every": 10}},
)
{NAME} = Experiment(
    "{NAME}",
    steps=[evaluate("{NAME}/eval", run, batch_size=8, evals={{"tasks": ["marin_python_mc"], "limit": 4}})],
)
'''
PROJECT = Path(__file__).resolve().parents[2]


def instance_yaml(home: Path) -> str:
    """The project's dagster.yaml (sqlite storage, local compute logs...) with its paths under ``home``."""
    text = (PROJECT / "dagster.yaml").read_text()
    assert text.count(".marin/dagster") == 3, "dagster.yaml's paths changed: update this test"
    return text.replace(".marin/dagster", str(home))


class ChatServer:
    """A chat-completions endpoint on localhost that answers every prompt with a score and keeps the
    Authorization header of each request (the run's annotator must send its key here)."""

    def __init__(self):
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.auth.append(self.headers.get("Authorization"))
                prompt = body["messages"][0]["content"]
                score = hashlib.sha256(prompt.encode()).digest()[0] % 6  # both classes, deterministically
                answer = {"choices": [{"message": {"role": "assistant", "content": f"Score: {score}"}}]}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def encodings(secret: str) -> dict[str, bytes]:
    """The forms a secret takes when something writes it: raw, JSON- or URL-escaped, or base64 (a
    base64 of a longer text holding the secret shows the secret's own run of characters at one of
    three alignments; each run is cut to the characters that only the secret's bytes decide)."""
    raw = secret.encode()
    forms = {
        "raw": raw,
        "json": json.dumps(secret)[1:-1].encode(),
        "url": urllib.parse.quote(secret, safe="").encode(),
        "url+": urllib.parse.quote_plus(secret).encode(),
    }
    for offset in range(3):
        start, end = -(-offset // 3) * 3, (offset + len(raw)) // 3 * 3  # whole 3-byte groups of the secret
        for name, encode in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
            text = encode(b"\0" * offset + raw)[start // 3 * 4 : end // 3 * 4]
            forms[f"{name}@{offset}"] = text
    return {name: form for name, form in forms.items() if len(form) >= 16}


@dataclass
class Hit:
    where: str
    secret: str
    form: str
    context: bytes

    def __str__(self) -> str:
        return f"{self.where}: {self.secret} ({self.form}) in ...{self.context!r}..."


def search(data: bytes, where: str, secrets: dict[str, str]) -> list[Hit]:
    """One hit per secret found in ``data``: the forms it was found in, and the first one's context."""
    hits = []
    for secret, value in secrets.items():
        found = {form: data.find(needle) for form, needle in encodings(value).items()}
        found = {form: at for form, at in found.items() if at >= 0}
        if found:
            form, at = next(iter(found.items()))
            context = data[max(0, at - 80) : at + len(encodings(value)[form]) + 80]
            hits.append(Hit(where, secret, ", ".join(found), context))
    return hits


def search_files(root: Path, secrets: dict[str, str]) -> tuple[list[Hit], int]:
    """Hits in every file under ``root`` (bytes: sqlite databases, binaries, logs alike); files searched."""
    hits, searched = [], 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        hits += search(path.read_bytes(), str(path.relative_to(root)), secrets)
        searched += 1
    return hits, searched


class TokenServer:
    """Google's OAuth token endpoint on localhost, named by the service-account file's ``token_uri``: it
    takes the JWT that google-auth signs with the file's private key and answers with an access token
    made up for the test (one more secret), keeping each JWT's issuer (the file's ``client_email``)."""

    def __init__(self, access_token: str):
        self.issuers: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                claims = form["assertion"][0].split(".")[1]
                server.issuers.append(json.loads(base64.urlsafe_b64decode(claims + "=="))["iss"])
                data = json.dumps({"access_token": access_token, "expires_in": 3600, "token_type": "Bearer"})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def service_account(token_uri: str) -> dict[str, str]:
    """A service-account key file as Google issues them: a real RSA key, made-up names."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return {
        "type": "service_account",
        "project_id": "marin-secrets-test",
        "private_key_id": uuid.uuid4().hex,
        "private_key": pem.decode(),
        "client_email": f"sa-{uuid.uuid4().hex[:12]}@marin-secrets-test.iam.gserviceaccount.com",
        "client_id": str(uuid.uuid4().int)[:21],
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    }


@dataclass
class Run:
    root: Path
    dagster_home: Path
    store: Path
    bucket: str
    secrets: dict[str, str]
    chat: ChatServer
    tokens: TokenServer
    account: dict[str, str]
    output: str
    seconds: float


@pytest.fixture(scope="module")
def run(tmp_path_factory, gcs_emulator) -> Run:
    """The experiment, run whole twice in the same instance: with the store in a local folder, then on a
    bucket (the Cloud Storage emulator), where gcsfs signs in with the service account."""
    root = tmp_path_factory.mktemp("run")
    creds = tmp_path_factory.mktemp("creds")  # outside the searched folder: the file is the secret
    access_token = f"ya29.{uuid.uuid4().hex}{uuid.uuid4().hex}"
    tokens, chat = TokenServer(access_token), ChatServer()
    account = service_account(tokens.url)
    credentials = creds / "service-account.json"
    credentials.write_text(json.dumps(account, indent=2))
    pem_lines = account["private_key"].splitlines()
    secrets = {
        "WANDB_API_KEY": uuid.uuid4().hex + uuid.uuid4().hex[:8],  # wandb's keys are 40 characters
        "MARIN_ANNOTATOR_API_KEY": f"sk-{uuid.uuid4().hex}",
        "GOOGLE_APPLICATION_CREDENTIALS (the file)": credentials.read_text(),
        "service account private_key": account["private_key"],
        **{f"service account private_key line {n}": pem_lines[n] for n in (1, len(pem_lines) // 2)},
        "service account private_key_id": account["private_key_id"],
        "service account client_email": account["client_email"],
        "Google access token": access_token,
        "HF_TOKEN": f"hf_{uuid.uuid4().hex}",  # read by huggingface_hub / datasets (under lm-eval)
        "MARIN_CANARY_ENV (the environment)": uuid.uuid4().hex,
    }
    dagster_home, store, experiments = root / "dagster", root / "store", root / "experiments"
    for folder in (dagster_home, experiments, root / "home", root / "tmp", root / "work", root / "wandb"):
        folder.mkdir()
    (dagster_home / "dagster.yaml").write_text(instance_yaml(dagster_home))
    (experiments / f"{NAME}.py").write_text(EXPERIMENT)
    bucket = f"gs://{EMULATOR_BUCKET}/secrets-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,  # with the emulator's address (gcs_emulator)
        "WANDB_API_KEY": secrets["WANDB_API_KEY"],
        "MARIN_ANNOTATOR_API_KEY": secrets["MARIN_ANNOTATOR_API_KEY"],
        "MARIN_ANNOTATOR_BASE_URL": chat.url,
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        "HF_TOKEN": secrets["HF_TOKEN"],
        "MARIN_CANARY_ENV": secrets["MARIN_CANARY_ENV (the environment)"],
        "MARIN_EXPERIMENTS_PATH": str(experiments),
        "DAGSTER_HOME": str(dagster_home),
        "MARIN_CACHE_DIR": str(root / "cache"),
        "WANDB_DIR": str(root / "wandb"),
        "HOME": str(root / "home"),  # whatever a library keeps in ~ (~/.netrc, ~/.config) is searched too
        "TMPDIR": str(root / "tmp"),
    }
    env.pop("WANDB_MODE", None)  # the project's default: offline (train/tracking.py), with the key set
    command = [str(Path(sys.executable).with_name("marin-pipelines")), "experiment", NAME, "--store-root"]
    started, output = time.monotonic(), ""
    try:
        for store_root in (str(store), bucket):
            done = subprocess.run(
                [*command, store_root],
                cwd=root / "work",  # the launcher's default JAX compilation cache (.marin/) lands here too
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            output += done.stdout + done.stderr
            assert done.returncode == 0, output[-5000:]
    finally:
        chat.close()
        tokens.close()
    seconds = time.monotonic() - started
    return Run(root, dagster_home, store, bucket, secrets, chat, tokens, account, output, seconds)


def test_the_search_finds_a_secret_in_any_of_its_forms(tmp_path):
    """The search itself can fail the test: a planted value is found raw, escaped, base64'd inside a
    longer text at each alignment, and inside a sqlite database."""
    secret = f"sk-{uuid.uuid4().hex}"
    planted = {
        "raw.log": f"key={secret}\n",
        "escaped.json": json.dumps({"env": f'he said "{secret}"\n'}),
        "header.txt": base64.b64encode(f"Bearer {secret}".encode()).decode(),
        "basic.txt": base64.b64encode(f"user:{secret}".encode()).decode(),
        "netrc.b64": base64.urlsafe_b64encode(f"password {secret}".encode()).decode(),
        "url.txt": "https://host/?key=" + urllib.parse.quote(f"{secret}/+=", safe=""),
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    with sqlite3.connect(tmp_path / "events.db") as db:
        db.execute("CREATE TABLE events (body TEXT)")
        db.execute("INSERT INTO events VALUES (?)", (json.dumps({"key": secret}),))
    (tmp_path / "clean.txt").write_text(uuid.uuid4().hex)
    hits, searched = search_files(tmp_path, {"key": secret})
    assert searched == len(planted) + 2
    assert {hit.where for hit in hits} == {*planted, "events.db"}
    assert not search(uuid.uuid4().hex.encode(), "nothing", {"key": secret})


def test_the_run_was_whole_and_used_every_secret(run):
    """Each stage ran in both stores, the annotator's key reached the chat server, gcsfs signed in with
    the service account, wandb wrote its offline runs, and Dagster kept event logs and compute logs on
    disk: the places searched below are real ones."""
    import fsspec

    local = json.loads((run.store / "_experiments" / f"{NAME}.json").read_text())
    fs, bucket = fsspec.url_to_fs(run.bucket, token="anon")
    on_bucket = json.loads(fs.cat_file(f"{bucket}/_experiments/{NAME}.json"))
    for record in (local, on_bucket):
        stages = {step["stage"] for step in record["steps"]}
        assert {"web_documents", "quality_labels", "tokenized_cache", "checkpoint", "eval_results"} <= stages
        assert {step["status"] for step in record["steps"]} == {"done"}
    key = run.secrets["MARIN_ANNOTATOR_API_KEY"]
    assert len(run.chat.auth) >= 4 and set(run.chat.auth) == {f"Bearer {key}"}
    assert run.tokens.issuers and set(run.tokens.issuers) == {run.account["client_email"]}
    assert list(run.store.rglob("wandb/offline-run-*/run-*.wandb")), "wandb wrote no offline run"
    assert [p for p in fs.find(bucket) if "/wandb/offline-run-" in p and p.endswith(".wandb")]
    logs = [p for p in (run.dagster_home / "logs").rglob("*") if p.suffix in (".out", ".err")]
    assert logs and any("secrets_probe/run: done" in p.read_text() for p in logs), "no compute logs"
    assert list((run.dagster_home / "storage").rglob("*.db"))


def test_no_file_the_run_wrote_holds_a_secret(run):
    """Every file under the run's folder: the instance's sqlite databases and compute logs, the local
    store (manifests, metadata, wandb's offline files, the execution record, the annotator's cache),
    MARIN_CACHE_DIR, WANDB_DIR, HOME, TMPDIR and the working directory."""
    hits, searched = search_files(run.root, run.secrets)
    assert searched > 100
    print(f"searched {searched} files; the two runs took {run.seconds:.0f} s")
    assert not hits, "secrets written to disk:\n" + "\n".join(map(str, hits))
    assert not search(run.output.encode(), "the command's output", run.secrets)


def test_no_object_the_run_wrote_to_the_bucket_holds_a_secret(run):
    import fsspec

    fs, bucket = fsspec.url_to_fs(run.bucket, token="anon")
    objects = fs.find(bucket)
    assert len(objects) > 50
    hits = [hit for name in objects for hit in search(fs.cat_file(name), name, run.secrets)]
    assert not hits, "secrets written to the bucket:\n" + "\n".join(map(str, hits))


def test_no_event_or_run_in_the_instance_holds_a_secret(run):
    """The event log, runs (config, tags) and their records as the instance API reads them back."""
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(run.dagster_home)))
    try:
        runs = instance.get_runs()
        assert len(runs) >= 4  # per store: the snapshot's run and the rest's
        hits = []
        for dagster_run in runs:
            events = instance.all_logs(dagster_run.run_id)
            assert events
            text = serialize_value(dagster_run) + "".join(serialize_value(e) for e in events)
            hits += search(text.encode(), f"run {dagster_run.run_id}", run.secrets)
    finally:
        instance.dispose()
    assert not hits, "secrets in the instance:\n" + "\n".join(map(str, hits))
