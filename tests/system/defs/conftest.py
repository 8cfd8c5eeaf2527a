"""Fixtures of the Dagster-layer tests: a real Postgres server, as the production instance's storage."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


class PostgresServer:
    """A running server: ``url`` of its ``postgres`` database; ``database(name)`` makes another."""

    def __init__(self, url: str):
        self.url = url

    def database(self, name: str) -> str:
        """A new, empty database; its URL (libpq's and SQLAlchemy's form: the socket as ``?host=``)."""
        import psycopg2
        from sqlalchemy.engine import make_url

        connection = psycopg2.connect(self.url)
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {name}")
        finally:
            connection.close()
        return make_url(self.url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real Postgres server for the session, stopped and deleted at its end. pgserver's wheel (a dev
    dependency) ships the binaries: nothing is installed or downloaded here. The server listens on a unix
    socket in its data folder, no TCP port. As root (CI), pgserver runs it as a system user of its own
    (``pgserver``, added with useradd the first time), since Postgres refuses to run as root, and opens
    the folders above the data to that user: so the data is in a folder of its own, not under pytest's
    base folder (which another pytest session may close again while the server starts)."""
    pgserver = pytest.importorskip("pgserver", reason="pgserver has wheels for x86_64 Linux and macOS only")
    folder = Path(tempfile.mkdtemp(prefix="marin-postgres-"))
    try:
        server = pgserver.get_server(folder / "data", cleanup_mode="delete")
        try:
            yield PostgresServer(server.get_uri())
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
