"""Data parallelism and FSDP over every device on one mesh axis, ``data`` (ZeRO-3 style, as Levanter).

The batch is split along its first axis. With FSDP each parameter (and its Adam moments) is split
along its largest dimension that the device count divides, so memory per device falls with the
device count; XLA inserts the all-gathers and reduce-scatters. Without FSDP parameters are replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"


def data_mesh() -> Mesh:
    """All local devices on one axis."""
    return Mesh(np.array(jax.devices()), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(AXIS))


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
