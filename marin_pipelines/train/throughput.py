"""The MFU denominator: a device's peak FLOP/s, from config or measured on this host's matmuls."""

from __future__ import annotations

import time
from functools import lru_cache

import jax
import jax.numpy as jnp


@lru_cache(maxsize=4)
def measure_matmul_peak(size: int = 1024, repeats: int = 3, dtype: str = "float32") -> float:
    """Best-of-``repeats`` FLOP/s of a jitted ``size`` x ``size`` matmul chain on the default device.

    On a CPU this is the honest ceiling for our training step (all of whose heavy work is matmuls),
    measured under whatever else the machine is running at the moment. Every training process measures it:
    a chain of 4, best of 3, reads what 8 and 5 read (206-209 GFLOP/s on 2 cores) in 0.2 s, not 0.6.
    """
    chain = 4
    x = jnp.ones((size, size), dtype) / size

    @jax.jit
    def matmuls(a: jax.Array) -> jax.Array:
        for _ in range(chain):
            a = a @ x
        return a

    matmuls(x).block_until_ready()  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmuls(x).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 * chain / best
