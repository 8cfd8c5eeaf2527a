"""Data parallelism and FSDP over every device on one mesh axis, ``data`` (ZeRO-3 style, as Levanter).

The batch is split along its first axis; in a run of several processes each process's devices hold one
contiguous block of rows (``process_rows``), which that process alone reads. With FSDP each parameter
(and its Adam moments) is split along its largest dimension that the device count divides, so memory
per device falls with the device count; XLA inserts the all-gathers and reduce-scatters. Without FSDP
parameters are replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"


def data_mesh() -> Mesh:
    """Every device of every process on one axis, each process's devices side by side."""
    return Mesh(np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id))), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(AXIS))


def process_rows(sharding: NamedSharding, shape: tuple[int, ...]) -> slice:
    """The rows of a global batch of ``shape`` that this process's devices hold: one contiguous block."""
    blocks = sorted(
        index[0].indices(shape[0])[:2] for index in sharding.addressable_devices_indices_map(shape).values()
    )
    start, stop = blocks[0][0], blocks[-1][1]
    if sum(high - low for low, high in set(blocks)) != stop - start:
        raise ValueError(f"this process's devices hold rows {blocks} of the batch: not one block")
    return slice(start, stop)


def state_shardings(state: Any, mesh: Mesh, fsdp: bool) -> Any:
    """A NamedSharding per leaf of ``state``: FSDP-split where a dimension divides, else replicated."""
    devices = mesh.shape[AXIS]

    def sharding(leaf: Any) -> NamedSharding:
        shape = np.shape(leaf)
        divisible = [axis for axis, size in enumerate(shape) if size % devices == 0 and size >= devices]
        if not fsdp or devices == 1 or not divisible:
            return NamedSharding(mesh, PartitionSpec())
        axis = max(divisible, key=lambda a: shape[a])
        spec = [None] * len(shape)
        spec[axis] = AXIS
        return NamedSharding(mesh, PartitionSpec(*spec))

    return jax.tree.map(sharding, state)
