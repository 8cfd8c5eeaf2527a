"""Compiled programs are kept per user, where another clone or the tests find them again."""

from pathlib import Path

from marin_pipelines.train.compilation_cache import compilation_cache_env, default_compilation_cache


def test_the_cache_is_the_users_unless_named(monkeypatch, tmp_path):
    for name in ("MARIN_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_compilation_cache() == str(tmp_path / ".cache" / "marin-pipelines" / "jax")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Path(default_compilation_cache()) == tmp_path / "xdg" / "marin-pipelines" / "jax"
    monkeypatch.setenv("MARIN_CACHE_DIR", "/fast/disk")
    assert default_compilation_cache() == "/fast/disk/jax"


def test_every_program_is_kept():
    env = compilation_cache_env("/c")
    assert env["JAX_COMPILATION_CACHE_DIR"] == "/c"
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"  # the many quick programs too
    assert "JAX_COMPILATION_CACHE_MAX_SIZE" not in env  # JAX's eviction locks every read (see the module)
