"""torch_npu.npu_quant_max: static per-tensor (or per-group) quantization to float8 / hifloat8
that also returns ``amax = max(|x|)``.

Formula (seed 004)::

    y    = cast(x * scale, dst_dtype)
    amax = max(|x|)

Precision and rounding: see :func:`npu_quant_max`.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_quant_max"
SCHEMA = ("npu_quant_max(Tensor x, Tensor scale, *, str round_mode=\"rint\", int dst_dtype=291, "
          "Tensor? group_list=None) -> (Tensor, Tensor)")

DST_FORMATS = ("float8_e5m2", "float8_e4m3fn", "hifloat8")
DST_SPELLED = ("torch.float8_e5m2 / torch_npu.float8_e5m2 (23 / 291)",
               "torch.float8_e4m3fn / torch_npu.float8_e4m3fn (24 / 292)",
               "torch_npu.hifloat8 (290)")
ROUND_MODES = ("rint", "round", "hybrid")
MAX_DIMS = 8
SUPPORTED = frozenset({Product.ASCEND_950})


def _format(dst_dtype) -> core.QuantFormat:
    return core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def check_quant_max(x, scale, *, round_mode="rint", dst_dtype=291, group_list=None):
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect(1 <= x.dim() <= MAX_DIMS, OP, "x", f"1 to {MAX_DIMS} dims",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect_nonempty(x, OP, "x")
    checks.expect_dtype(scale, (torch.float32,), OP, "scale")
    checks.expect_dim(scale, 1, OP, "scale")
    checks.expect_same_device({"x": x, "scale": scale}, OP)
    checks.expect_one_of(round_mode, ROUND_MODES, OP, "round_mode")
    fmt = _format(dst_dtype)
    if fmt.name == "hifloat8":
        checks.expect(round_mode != "rint", OP, "round_mode",
                      "'round' or 'hybrid' for hifloat8 output ('rint' is for float8)",
                      repr(round_mode), ValueError)
    else:
        checks.expect(round_mode == "rint", OP, "round_mode",
                      lambda: f"'rint' for {fmt.name} output ('round' / 'hybrid' are for "
                      "hifloat8)", repr(round_mode), ValueError)
    targets.expect_supported(OP, SUPPORTED)
    if group_list is None:
        checks.expect(scale.shape[0] == 1, OP, "scale", "shape (1,) without group_list",
                      lambda: f"shape {tuple(scale.shape)}")
        return
    checks.expect_dtype(group_list, (torch.int64, torch.int32), OP, "group_list")
    checks.expect_dim(group_list, 1, OP, "group_list")
    checks.expect_same_device({"x": x, "group_list": group_list}, OP)
    checks.expect(group_list.shape[0] >= 1, OP, "group_list", "at least one group",
                  lambda: f"shape {tuple(group_list.shape)}", ValueError)
    checks.expect(x.dim() >= 2, OP, "x", "2 or more dims with group_list (groups split dim 0)",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(scale.shape[0] == group_list.shape[0], OP, "scale",
                  lambda: f"one entry per group ({group_list.shape[0]})",
                  lambda: f"shape {tuple(scale.shape)}")


def quant_max_reference(x, scale, *, round_mode="rint", dst_dtype=291, group_list=None):
    fmt = _format(dst_dtype)
    v = core.to_float32(x)
    s = scale.to(torch.float32)
    if group_list is None:
        amax = v.abs().amax().reshape(1)
        y = core.cast_to(v * s, fmt, round_mode=round_mode)
        return y, amax.to(x.dtype)
    rows = v.shape[0]
    g = group_list.shape[0]
    ends = group_list.to(torch.int64).contiguous()
    gid = torch.searchsorted(ends, torch.arange(rows, device=v.device, dtype=torch.int64),
                             right=True)
    inside = gid < g                             # rows past the last end belong to no group
    gid = gid.clamp(max=g - 1)
    row_scale = torch.where(inside, s[gid], torch.zeros_like(s[gid]))
    bshape = (rows,) + (1,) * (v.dim() - 1)
    y = core.cast_to(v * row_scale.reshape(bshape), fmt, round_mode=round_mode)
    row_amax = v.abs().reshape(rows, -1).amax(dim=1)
    row_amax = torch.where(inside, row_amax, torch.zeros_like(row_amax))
    amax = torch.zeros(g, dtype=torch.float32, device=v.device).scatter_reduce(
        0, gid, row_amax, "amax", include_self=True)
    if g == 1:
        amax = amax.reshape(1)
    return y, amax.to(x.dtype)


quant_max_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_quant_max,
                     reference=quant_max_reference, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
quant_max_op.forbid_autograd("npu_quant_max has no backward on the NPU")


def npu_quant_max(x, scale, *, round_mode="rint", dst_dtype=291, group_list=None):
    """Quantize ``x`` to float8 or hifloat8 with a given scale, and return ``max(|x|)`` with it.

    Formula (seed 004)::

        y    = cast(x * scale, dst_dtype)
        amax = max(|x|)

    Parameters
    ----------
    x : Tensor
        float32, float16 or bfloat16, 1 to 8 dims, non-empty, any strides.
    scale : Tensor
        float32 of shape ``(1,)``; with ``group_list``, shape ``(G,)`` (one per group).
    round_mode : {'rint', 'round', 'hybrid'}
        'rint' (round half to even) for the float8 outputs, and only for them; 'round' (half
        away from zero) or 'hybrid' (CAST_HYBRID, see :mod:`npu_anywhere.ops.quant.hifloat8`)
        for hifloat8, which takes no other.
    dst_dtype : int or dtype
        ``torch_npu.float8_e5m2`` (291, default; ``torch.float8_e5m2`` / 23 too),
        ``torch_npu.float8_e4m3fn`` (292 / ``torch.float8_e4m3fn`` / 24),
        ``torch_npu.hifloat8`` (290).
    group_list : Tensor, optional
        op-plugin's extra argument: int64 (or int32) ``(G,)``, cumulative row ends along dim
        0 (``group_list[g-1] <= row < group_list[g]`` is group g, scaled by ``scale[g]``).
        Must be non-decreasing with last entry == x.shape[0] (data, not checked; rows past
        the last entry get scale 0 and do not enter any amax).

    Returns
    -------
    (y, amax)
        ``y``: float8 of x's shape (hifloat8: uint8 holding the codes).  ``amax``: x's dtype,
        shape ``(1,)``, or ``(G,)`` with a group_list of G > 1 entries (an empty group's amax
        is 0).

    Constraints
    -----------
    Atlas 350 / Ascend 950 only (strict mode rejects other products).

    Notes
    -----
    The 950 kernel (hicann/ops-nn ``quant/quant_max/op_kernel/arch35/
    quant_max_per_tensor_regbase.h``) multiplies: ``y = cast(float32(x) * scale)`` with a
    saturating, round-half-even float32 -> float8 conversion (``SatMode::SAT``: overflow gives
    +-448 / +-57344 and NaN gives +0, as the CANN golden ``quant/quant_max/tests/assets/
    golden.py`` does with ``nan_to_num``; hifloat8: the given ``round_mode``, saturating to
    +-32768 with NaN -> 0, ``quant_max_common.h``), and
    reduces ``max(|float32(x)|)``, written back in x's dtype (exact).  This settles the seed's
    ``x * scale`` against op-plugin's golden (``test/test_custom_ops/test_npu_quant_max.py``),
    which divides by the scale.  The output y dtype follows op-plugin's meta registration.
    NaN in x makes amax NaN (torch's max; the kernel's behaviour is not documented).  No
    backward.

    Examples
    --------
    >>> x = torch.tensor([[1.0, -3.0], [0.25, 2.0]])
    >>> y, amax = npu_anywhere.npu_quant_max(x, torch.tensor([2.0]))
    >>> y.float().tolist(), amax.tolist()
    ([[2.0, -6.0], [0.5, 4.0]], [3.0])
    """
    return quant_max_op(x, scale, round_mode=round_mode, dst_dtype=dst_dtype,
                        group_list=group_list)


compiled.register(
    quant_max_op,
    key=lambda x, scale, *, round_mode="rint", dst_dtype=291, group_list=None: (
        x.dtype, x.device.type, x.dim(), dst_dtype, group_list is None))


TORCH_NPU_FUNCTIONS = {"npu_quant_max": npu_quant_max}
