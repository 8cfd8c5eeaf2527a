"""The MFU denominator: the mesh's peak FLOP/s in the run's compute dtype, from config or measured."""

from __future__ import annotations

import time
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

CPU_SIZE, ACCELERATOR_SIZE = 1024, 8192  # a GPU's chain of 1024^2 matmuls (~10 us) would time its dispatch


@lru_cache(maxsize=8)
def measure_matmul_peak(
    size: int | None = None, repeats: int = 3, dtype: str = "float32", mesh: Mesh | None = None
) -> tuple[float, str]:
    """Best-of-``repeats`` FLOP/s of a jitted ``size`` x ``size`` matmul chain in ``dtype`` on every device of
    ``mesh`` at once (each its own chain; by default the one default device), and what was measured, read
    from the operand itself (its dtype, its devices), so that the summary cannot claim more than was run.

    So the peak is the mesh's, not one device's: a run on 8 GPUs is measured against 8 GPUs, and a bf16 run
    against bf16 matmuls. Forced host CPU devices share the host's cores, so their sum is the host's peak,
    as it should be. On a CPU this is the honest ceiling for our training step (all of whose heavy work is
    matmuls), measured under whatever else the machine is running at the moment. Every training process
    measures it: a chain of 4, best of 3, reads what 8 and 5 read (206-209 GFLOP/s on 2 cores) in 0.2 s.
    An accelerator gets 8192^2 blocks (0.5 ms a matmul in bf16 on an H200), long enough that the launch
    does not count; set ``train.peak_flops`` to the card's datasheet peak to compare with published MFUs.
    """
    mesh = mesh or Mesh(np.array(jax.devices()[:1]).reshape(1), ("devices",))
    if size is None:
        size = CPU_SIZE if mesh.devices.flat[0].platform == "cpu" else ACCELERATOR_SIZE
    chain, x = 4, peak_operand(mesh, dtype, size)

    @jax.jit
    def matmuls(a: jax.Array, b: jax.Array) -> jax.Array:
        for _ in range(chain):
            a = jnp.einsum("dij,djk->dik", a, b)
        return a

    matmuls(x, x).block_until_ready()  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmuls(x, x).block_until_ready()
        best = min(best, time.perf_counter() - start)
    devices = len(x.sharding.device_set)
    flops = 2.0 * size**3 * chain * x.shape[0] / best
    return flops, f"measured: {x.dtype} {size}x{size} matmuls on all {devices} devices at once"


def peak_operand(mesh: Mesh, dtype: str, size: int) -> jax.Array:
    """``[devices, size, size]`` in ``dtype``, one block on each device of ``mesh`` (made there, so that a
    run of several processes makes only its own)."""
    sharding = NamedSharding(mesh, PartitionSpec(mesh.axis_names))
    return jax.jit(lambda: jnp.ones((mesh.size, size, size), dtype) / size, out_shardings=sharding)()


def mesh_peak(mesh: Mesh, dtype: str, per_device: float | None) -> tuple[float, str]:
    """The MFU denominator of a run on ``mesh`` computing in ``dtype``, and where it came from:
    ``per_device`` (``train.peak_flops``: the card's peak in the run's dtype) x the devices, else measured.
    An FP8 run (``model.fp8``) computes in ``model.dtype`` outside its projections and is measured against
    that dtype's matmuls, so FP8's gain shows as a higher MFU (as ``bench/gpu_mfu.py`` compares arms)."""
    if per_device:
        return per_device * mesh.size, f"train.peak_flops {per_device:.4g} x {mesh.size} devices"
    return measure_matmul_peak(dtype=dtype, mesh=mesh)
