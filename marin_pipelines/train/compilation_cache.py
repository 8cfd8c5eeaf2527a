"""JAX's persistent compilation cache, as every local JAX process of this project keeps it.

One folder per user (``jax`` in the project's cache folder, ``store.cache_dir()``), as pip and uv keep their
downloads: a new clone, a second store or the tests compile nothing that an earlier run on this machine
compiled. JAX keys each entry by the program, the compiler's version and its flags, so a shared folder never
hands a process another program. It grows only by programs never compiled before (the tests' take ~25 MB);
delete it to start afresh. Not bounded by ``jax_compilation_cache_max_size``: JAX's eviction takes a lock
for every read and lists the whole folder for every write (pytest in a cold `make test`: 13.9 min with it,
12.2 without at the commit before).
"""

from __future__ import annotations

from marin_pipelines.store import cache_dir


def default_compilation_cache() -> str:
    return str(cache_dir() / "jax")


def compilation_cache_env(folder: str) -> dict[str, str]:
    """The environment that makes a JAX process keep every program it compiles in ``folder`` (even the
    quick ones: a training process compiles dozens of small ones, which add up across a ladder)."""
    return {
        "JAX_COMPILATION_CACHE_DIR": folder,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
