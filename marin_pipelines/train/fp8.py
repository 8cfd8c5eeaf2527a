"""FP8 matmuls with current scaling, for GPUs with FP8 tensor cores (H100 and later): ``model.fp8``.

Each operand is scaled by its own absolute maximum at this call (per tensor: "current" scaling, no amax
history to keep in the state) into float8: e4m3 for activations and weights going forward, e5m2 (more
range, less precision) for the gradient coming back, as Transformer Engine's hybrid format. The matmul
accumulates in float32 and is rescaled; XLA lowers a dot of FP8 operands to the FP8 GEMMs of cuBLASLt on
Hopper. Parameters, optimiser state, norms, attention and the LM head stay in their dtypes.

On a CPU the dot runs, but only by converting back to float32 (slower, no gain): the trainer refuses
``model.fp8`` there (``check_fp8``), so a config meant for a GPU never silently runs as something else.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

FORWARD, BACKWARD = jnp.float8_e4m3fn, jnp.float8_e5m2
FP8_PLATFORMS = ("gpu", "cuda", "rocm")


def quantize(x: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """``x / scale`` in ``dtype`` and the float32 scale that maps its absolute maximum to dtype's largest."""
    amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
    scale = jnp.where(amax > 0, amax / float(jnp.finfo(dtype).max), 1.0)
    return (x.astype(jnp.float32) / scale).astype(dtype), scale


def _matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """a[..., k] @ b[k, n], accumulated in float32."""
    return jax.lax.dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


@jax.custom_vjp
def fp8_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x[..., k] @ w[k, n]`` in FP8 with current scaling, the result in x's dtype."""
    return _forward(x, w)[0]


def _forward(x: jax.Array, w: jax.Array) -> tuple[jax.Array, tuple]:
    qx, sx = quantize(x, FORWARD)
    qw, sw = quantize(w, FORWARD)
    out = (_matmul(qx, qw) * (sx * sw)).astype(x.dtype)
    dtypes = (jnp.zeros((), x.dtype), jnp.zeros((), w.dtype))  # residuals are arrays: the dtypes as scalars
    return out, (qx, sx, qw, sw, *dtypes)


def _backward(saved: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    qx, sx, qw, sw, x_like, w_like = saved
    qg, sg = quantize(g, BACKWARD)
    grad_x = _matmul(qg, qw.T) * (sg * sw)
    k, n = qx.shape[-1], qg.shape[-1]
    grad_w = _matmul(qx.reshape(-1, k).T, qg.reshape(-1, n)) * (sx * sg)
    return grad_x.astype(x_like.dtype), grad_w.astype(w_like.dtype)


fp8_matmul.defvjp(_forward, _backward)


def fp8_dot_general(
    lhs: jax.Array,
    rhs: jax.Array,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
    out_sharding: Any = None,
) -> jax.Array:
    """``nnx.Linear``'s ``dot_general`` (x[..., in] @ kernel[in, out]) in FP8; any other contraction is an
    error, as this is only for linear layers."""
    (contract_lhs, contract_rhs), (batch_lhs, batch_rhs) = dimension_numbers
    if tuple(contract_lhs) != (lhs.ndim - 1,) or tuple(contract_rhs) != (0,) or batch_lhs or batch_rhs:
        raise ValueError(f"fp8_dot_general takes x @ kernel only, not dimension_numbers {dimension_numbers}")
    return fp8_matmul(lhs, rhs)


def check_fp8(platform: str) -> None:
    """``model.fp8`` on devices without FP8 matmuls is refused, naming the field and what to do."""
    if platform not in FP8_PLATFORMS:
        raise ValueError(
            f"model.fp8: FP8 matmuls need a GPU with FP8 tensor cores (H100 or later); this run's devices "
            f"are {platform}, where FP8 would only be emulated in float32: remove model.fp8 for this run"
        )
