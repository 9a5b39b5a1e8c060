"""torch_npu.npu_clipped_swiglu: the GPT-OSS clipped SwiGLU.

Formula (seed 004, ``npu_clipped_swiglu``)::

    x viewed as [pre, cut * after]            (pre: dims before ``dim``; cut: x.shape[dim])
    x = x[:sum(group_index), :]               (only when group_index is given)
    interleaved: A = x[:, 0::2], B = x[:, 1::2]
    otherwise:   A = x[:, :h],   B = x[:, h:]            h = x.shape[1] // 2
    A = A.clamp(max=limit);  B = B.clamp(-limit, limit)
    y = A * sigmoid(alpha * A) * (B + bias)
    y reshaped to x's shape with dim ``dim`` halved

Precision: computed in float32 (float64 for float64) and rounded once (hicann/ops-nn
activation/clipped_swiglu/tests/assets/golden.py computes in float32).
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common
from .glu_core import clipped_glu_fp32, glu_halves

OP = "npu_clipped_swiglu"
SCHEMA = ("npu_clipped_swiglu(Tensor x, *, Tensor? group_index=None, int dim=-1, "
          "float alpha=1.702, float limit=7.0, float bias=1.0, bool interleaved=True) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_FLOAT32_MAX = torch.finfo(torch.float32).max


def check_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
                         interleaved=True):
    op = OP
    _common.expect_float(op, "x", x)
    _common.expect_rank(op, "x", x, 1, 8)
    _common.expect_split_dim(op, "x", x, dim)
    if group_index is not None:
        checks.expect_dtype(group_index, (torch.int64,), op, "group_index")
        checks.expect_dim(group_index, 1, op, "group_index")
        checks.expect_same_device({"x": x, "group_index": group_index}, op)
    # The kernel takes the three as float32 attributes; a finite value beyond float32's range
    # has no float32 meaning (and eager clamp refuses it), while +-inf is a valid "no limit".
    for name, value in (("alpha", alpha), ("limit", limit), ("bias", bias)):
        checks.expect(not math.isfinite(value) or abs(value) <= _FLOAT32_MAX, op, name,
                      "a value within float32's range (a float32 attribute of the kernel) or "
                      "+-inf", value, ValueError)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None:
        # seed 004: "x的维数必须大于1维" (aclnnClippedSwiglu itself accepts 1-D).
        checks.expect(x.dim() >= 2, op, "x", lambda: f"at least 2 dims on {product.value}",
                      lambda: f"shape {tuple(x.shape)}", ValueError)


def _prod(sizes) -> int:
    out = 1
    for s in sizes:
        out = out * s
    return out


def clipped_swiglu_reference(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
                             interleaved=True):
    n = dim % x.dim()
    pre = _prod(x.shape[:n])
    flat = x.reshape(pre, _prod(x.shape[n:]))
    a, b = glu_halves(flat, -1, interleaved)
    y = clipped_glu_fp32(a, b, alpha=alpha, limit=limit, bias=bias)
    if group_index is not None:
        # Rows at or past sum(group_index) are not computed; they are zeros here (on the NPU
        # they keep whatever the freshly allocated output held).
        computed = torch.arange(pre, device=x.device) < group_index.sum()
        y = torch.where(computed.unsqueeze(-1), y, torch.zeros((), dtype=y.dtype,
                                                               device=y.device))
    out_shape = list(x.shape)
    out_shape[n] = out_shape[n] // 2
    return y.to(x.dtype).reshape(out_shape)


clipped_swiglu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_clipped_swiglu,
                          reference=clipped_swiglu_reference, metadata_check=True,
                          info=OpInfo(api="torch_npu"))
clipped_swiglu_op.forbid_autograd("npu_clipped_swiglu has no backward in op-plugin "
                                  "(derivatives.yaml lists none)")


def npu_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
                       interleaved=True):
    """Clipped SwiGLU (GPT-OSS): ``A.clamp(max=limit) * sigmoid(alpha A) * (B.clamp(+-limit) + bias)``.

    Formula (seed 004)::

        x viewed as [pre, cut * after]       pre = prod(x.shape[:dim]), cut = x.shape[dim]
        x = x[:sum(group_index)]             when group_index is given
        interleaved=True:  A = x[:, 0::2], B = x[:, 1::2]
        interleaved=False: A = x[:, :h],   B = x[:, h:]        h = x.shape[1] // 2
        A = A.clamp(max=limit);  B = B.clamp(min=-limit, max=limit)
        y = A * sigmoid(alpha * A) * (B + bias)

    Parameters
    ----------
    x : Tensor
        float16, bfloat16 or float32 (float64 accepted outside strict mode), 1-D to 8-D (seed
        004 asks for at least 2 dims; strict mode enforces it), even along ``dim``.
    group_index : Tensor, optional, keyword-only
        1-D int64; ``sum(group_index)`` is the number of leading rows (of the ``[pre, ...]``
        view) that are computed.  Elements should be >= 0 (not checked: it is a value).
    dim : int, default -1
        The axis cut in two, in ``[-x.dim(), x.dim() - 1]``.
    alpha, limit, bias : float, defaults 1.702, 7.0, 1.0
    interleaved : bool, default True
        True: even/odd split of the flattened ``cut * after`` row; False: first/second half.

    Returns
    -------
    Tensor
        ``x``'s shape with ``dim`` halved, ``x``'s dtype; computed in float32, rounded once.

    Constraints
    -----------
    Strict mode: A2 and A3 (seed 004), at least 2 dims.

    Notes
    -----
    With ``group_index``, rows from ``min(sum, pre)`` on are not computed by the NPU kernel
    (hicann/ops-nn activation/clipped_swiglu/op_kernel: the row count is clamped to ``pre`` and
    nothing else is written), so they hold uninitialized memory there; we return zeros, as
    op-plugin's CPU golden (test/test_custom_ops/test_npu_clipped_swiglu.py) builds them.  The
    even/odd split runs over the flattened ``cut * after`` axis, which equals an even/odd split
    of ``dim`` only when ``dim`` is the last axis.  The NPU does not accept non-contiguous x; we
    do.  No backward (derivatives.yaml lists none).

    Examples
    --------
    >>> x = torch.randint(-10, 10, (4608, 2048), dtype=torch.float32)
    >>> group_index = torch.randint(1, 101, (4,), dtype=torch.int64)
    >>> npu_anywhere.npu_clipped_swiglu(x, group_index=group_index).shape
    torch.Size([4608, 1024])
    """
    return clipped_swiglu_op(x, group_index=group_index, dim=dim, alpha=alpha,
                             limit=limit, bias=bias, interleaved=interleaved)


compiled.register(
    clipped_swiglu_op,
    key=lambda x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
    interleaved=True: (dim, x.shape[dim], interleaved, group_index is None, alpha, limit,
                       bias, x.dtype, x.device.type))


TORCH_NPU_FUNCTIONS = {"npu_clipped_swiglu": npu_clipped_swiglu}
