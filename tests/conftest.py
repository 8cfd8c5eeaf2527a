"""Shared fixtures: real web data from ../shared/data beside the project, when present."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real web data not found at {SHARED_DATA}")
    return SHARED_DATA


# gcsfs reads this when imported: its default asks a gRPC control API for the bucket type, which the
# emulator below does not speak (each call would wait 60 s for it)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
EMULATOR_BUCKET = "marin-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A local Cloud Storage server (the JSON API), as gcsfs, tensorstore and orbax reach a real bucket.

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
    env = {
        "STORAGE_EMULATOR_HOST": address,  # gcsfs
        "TENSORSTORE_GCS_HTTP_URL": address,  # tensorstore, under orbax
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
        server.terminate()
        server.wait(timeout=10)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def gcs_root(gcs_emulator: str) -> str:
    """A fresh ``gs://`` prefix on the emulator for one test."""
    return f"gs://{EMULATOR_BUCKET}/{uuid.uuid4().hex[:8]}"
