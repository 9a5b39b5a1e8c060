"""torch_npu.npu_interleave_rope: de-interleave the head dim, then half-mode RoPE.

Formula (op-plugin's torch_npu-npu_interleave_rope.md; ops-transformer posembedding)::

    q = reshape(x, [B, N, S, D/2, 2]).transpose(-1, -2).reshape([B, N, S, D])
    out = q * cos + rotate_half(q) * sin,     rotate_half(q) = cat(-q[D/2:], q[:D/2])

so the output is in the de-interleaved (half) order: evens first, then odds.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING_OR_DOUBLE
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from .rotation import prepare, rope

OP = "npu_interleave_rope"
SCHEMA = "npu_interleave_rope(Tensor x, Tensor cos, Tensor sin) -> Tensor"
HEAD_DIM = 64
_SUPPORTED = frozenset({Product.A2, Product.A3})
_HALF = (torch.float16, torch.bfloat16)


def check_interleave_rope(x, cos, sin):
    op = OP
    product = targets.expect_supported(op, _SUPPORTED)
    # float32/float64 are accepted outside strict mode for golden computations.
    allowed = _HALF if product is not None else FLOATING_OR_DOUBLE
    named = {"x": x, "cos": cos, "sin": sin}
    for name, t in named.items():
        checks.expect_dtype(t, allowed, op, name)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    for name, t in named.items():
        checks.expect_dim(t, 4, op, name)
        checks.expect(t.shape[-1] == HEAD_DIM, op, name, f"a last dim (D) of {HEAD_DIM}",
                      lambda t=t: t.shape[-1], ValueError)
    checks.expect(sin.shape == cos.shape, op, "sin", lambda: f"the shape of cos {tuple(cos.shape)}",
                  lambda: tuple(sin.shape))
    checks.expect(cos.shape[1] == 1, op, "cos", "N (dim 1) equal to 1",
                  lambda: f"shape {tuple(cos.shape)}")
    checks.expect(cos.shape[0] == x.shape[0], op, "cos", lambda: f"B (dim 0) equal to x's "
                  f"({x.shape[0]})", lambda: f"shape {tuple(cos.shape)}")
    checks.expect(cos.shape[2] in (1, x.shape[2]), op, "cos",
                  lambda: f"S (dim 2) equal to 1 or to x's ({x.shape[2]})",
                  lambda: f"shape {tuple(cos.shape)}")
    if product is not None:
        for name, t in named.items():
            checks.expect(t.is_contiguous(), op, name, f"a contiguous tensor on {product.value}",
                          "a non-contiguous tensor", ValueError)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...) along the last dim."""
    return x.unflatten(-1, (x.shape[-1] // 2, 2)).transpose(-1, -2).flatten(-2)


def interleave_rope_reference(x, cos, sin):
    c, s = prepare(cos, sin, "half", x.dtype)
    return rope(deinterleave(x), c, s, "half")


interleave_rope_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_interleave_rope,
                           reference=interleave_rope_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
interleave_rope_op.forbid_autograd("npu_interleave_rope is inference-only (no backward)")
compiled.register(interleave_rope_op, key=lambda x, cos, sin: (x.dtype, x.device.type))


def npu_interleave_rope(x, cos, sin):
    """RoPE on an interleaved head dim, returning the result in half (de-interleaved) order.

    Formula::

        q = x.reshape(B, N, S, D/2, 2).transpose(-1, -2).reshape(B, N, S, D)
        out = q * cos + rotate_half(q) * sin,  rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2])

    Parameters
    ----------
    x : Tensor
        (B, N, S, 64), float16 or bfloat16 (float32/float64 accepted outside strict mode).
    cos, sin : Tensor
        (B, 1, S or 1, 64), x's dtype.

    Returns
    -------
    Tensor of x's shape and dtype, computed in float32 and rounded once.

    Constraints
    -----------
    D == 64; cos/sin N == 1.  Strict mode (A2/A3): float16/bfloat16 only, contiguous inputs.
    Inference only (no backward).
    """
    return interleave_rope_op(x, cos, sin)


TORCH_NPU_FUNCTIONS = {"npu_interleave_rope": npu_interleave_rope}
