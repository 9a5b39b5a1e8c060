"""What npu_dynamic_quant and npu_dynamic_quant_asymmetric share: the check, smoothing (with the
MoE ``group_index``), the reduction dims of each ``quant_mode`` and the output shapes.

Sources: seed 004 (both docstrings), op-plugin
``op_plugin/ops/opapi/DynamicQuantKernelNpuOpApi.cpp`` (dst_type handling, scale shapes per
quant_mode) and ``op_plugin/python/meta/_meta_registrations.py``, CANN ``aclnnDynamicQuantV4``
(hicann/ops-nn ``quant/dynamic_quant/docs/aclnnDynamicQuantV4.md``: quant modes, dst types,
dstTypeMax, smooth-scale shapes, at most 1024 experts) and the A2/A3 / 950 kernels under
``quant/dynamic_quant/op_kernel/``.
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...targets import Product
from . import core

QUANT_MODES = ("pertoken", "pertensor", "perchannel")
DST_FORMATS = ("int8", "int4", "float8_e4m3fn", "float8_e5m2", "hifloat8")
DST_SPELLED = ("torch.int8", "torch.quint4x2", "torch_npu.int4", "torch.float8_e4m3fn",
               "torch.float8_e5m2", "torch_npu.hifloat8")
MAX_EXPERTS = 1024
DST_TYPE_MAX_LIMIT = 32768.0

_A2_A3 = frozenset({Product.A2, Product.A3})
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def parse_format(op: str, dst_type) -> core.QuantFormat:
    return core.parse_dst_type(dst_type, op=op, param="dst_type", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def check_dynamic(op: str, input: torch.Tensor, smooth_scales: Optional[torch.Tensor],
                  group_index: Optional[torch.Tensor], dst_type, quant_mode: str,
                  dst_type_max: float) -> core.QuantFormat:
    """The documented constraints of both dynamic quant ops (default mode: their union)."""
    checks.expect_one_of(quant_mode, QUANT_MODES, op, "quant_mode")
    fmt = parse_format(op, dst_type)
    checks.expect(0.0 <= dst_type_max <= DST_TYPE_MAX_LIMIT, op, "dst_type_max",
                  f"a value in [0, {DST_TYPE_MAX_LIMIT:g}] (used by hifloat8 only)",
                  dst_type_max, ValueError)
    # float32 input is not documented (float16/bfloat16); the computation is float32 anyway,
    # so default mode accepts it and strict mode rejects it.
    checks.expect_dtype(input, FLOATING, op, "x")
    checks.expect(input.dim() > 1, op, "x", "more than 1 dim",
                  lambda: f"shape {tuple(input.shape)}", ValueError)
    h = input.shape[-1]
    checks.expect(h > 0, op, "x", "a non-empty last dim", lambda: f"shape {tuple(input.shape)}",
                  ValueError)
    if quant_mode == "pertensor":
        checks.expect_nonempty(input, op, "x")
    if quant_mode == "perchannel":
        checks.expect(input.shape[-2] > 0, op, "x", "a non-empty second-to-last dim in perchannel "
                      "mode", lambda: f"shape {tuple(input.shape)}", ValueError)
    if fmt.name == "int4":
        checks.expect(h % 8 == 0, op, "x", "a last dim divisible by 8 for int4 output", h,
                      ValueError)
    if group_index is not None:
        checks.expect(smooth_scales is not None, op, "group_index",
                      "to come with smooth_scales (it groups the rows of smooth_scales)",
                      "group_index without smooth_scales", ValueError)
        checks.expect(quant_mode == "pertoken", op, "group_index",
                      "None unless quant_mode is 'pertoken'", repr(quant_mode), ValueError)
        checks.expect_dtype(group_index, (torch.int32,), op, "group_index")
        checks.expect_dim(group_index, 1, op, "group_index")
        checks.expect_same_device({"x": input, "group_index": group_index}, op)
    if smooth_scales is not None:
        checks.expect_dtype(smooth_scales, FLOATING, op, "smooth_scales")
        checks.expect_same_device({"x": input, "smooth_scales": smooth_scales}, op)
        if group_index is not None:
            checks.expect_dim(smooth_scales, 2, op, "smooth_scales")
            e = smooth_scales.shape[0]
            checks.expect(smooth_scales.shape[1] == h, op, "smooth_scales",
                          lambda: f"shape (E, {h}) (E experts, the last dim of x)",
                          lambda: tuple(smooth_scales.shape))
            checks.expect(1 <= e <= MAX_EXPERTS, op, "smooth_scales",
                          f"between 1 and {MAX_EXPERTS} experts (rows)", e, ValueError)
            checks.expect(group_index.shape[0] == e, op, "group_index",
                          lambda: f"one entry per row of smooth_scales ({e})",
                          lambda: tuple(group_index.shape))
        else:
            want = input.shape[-2] if quant_mode == "perchannel" else h
            where = "the second-to-last dim of x (perchannel)" if quant_mode == "perchannel" \
                else "the last dim of x"
            checks.expect(smooth_scales.dim() == 1 and smooth_scales.shape[0] == want, op,
                          "smooth_scales", lambda: f"a 1-D tensor of size {want}, {where}",
                          lambda: f"shape {tuple(smooth_scales.shape)}")
    _check_strict(op, input, smooth_scales, fmt, quant_mode)
    return fmt


def _check_strict(op, input, smooth_scales, fmt, quant_mode) -> None:
    product = targets.expect_supported(op, SUPPORTED)
    if product is None:
        return
    checks.expect(input.dtype in (torch.float16, torch.bfloat16), op, "x",
                  lambda: f"dtype float16 or bfloat16 on {product.value}", str(input.dtype),
                  TypeError)
    if smooth_scales is not None:
        checks.expect(smooth_scales.dtype == input.dtype, op, "smooth_scales",
                      lambda: f"the dtype of x ({input.dtype}) in single-op mode",
                      str(smooth_scales.dtype), TypeError)
    if product in _A2_A3:
        # aclnnDynamicQuantV3/V4 (pertensor/perchannel, float8/hifloat8) exist on the 950 only.
        checks.expect(fmt.name in ("int8", "int4"), op, "dst_type",
                      lambda: f"torch.int8 or torch.quint4x2 on {product.value}", fmt.name,
                      ValueError)
        checks.expect(quant_mode == "pertoken", op, "quant_mode",
                      lambda: f"'pertoken' on {product.value}", repr(quant_mode), ValueError)


# -- reference pieces -------------------------------------------------------------------------

def smoothed(input: torch.Tensor, smooth_scales: Optional[torch.Tensor],
             group_index: Optional[torch.Tensor], quant_mode: str) -> tuple[torch.Tensor, bool]:
    """``x * smooth_scales`` in float32 (contiguous), rows grouped by ``group_index`` if given.

    MoE: row ``r`` (of x viewed as (rows, H)) is multiplied by ``smooth_scales[i]`` where
    ``group_index[i-1] <= r < group_index[i]`` (``group_index`` holds cumulative row ends).  Rows at
    or past the last entry belong to no group and are left unscaled (the doc requires the last
    entry to equal the row count; op-plugin's golden leaves such rows unscaled too).

    Returns ``(v, owned)``: ``owned`` is False when ``v`` is ``input`` itself (contiguous
    float32 without smoothing), which must then not be written.
    """
    v = core.to_float32(input)
    # to_float32 returns input itself exactly when it already is contiguous float32 (decided
    # from metadata, so that traced code takes the same branch as eager code).
    owned = not (input.dtype == torch.float32 and input.is_contiguous())
    if smooth_scales is None:
        return v, owned
    s = smooth_scales.to(torch.float32)
    if group_index is None:
        s = s.unsqueeze(-1) if quant_mode == "perchannel" else s
        return (v.mul_(s) if owned else v * s), True
    h = v.shape[-1]
    rows = v.reshape(-1, h)
    ends = group_index.to(torch.int64).contiguous()
    row_ids = torch.arange(rows.shape[0], device=v.device, dtype=torch.int64)
    group = torch.searchsorted(ends, row_ids, right=True)
    e = s.shape[0]
    row_scale = s[group.clamp(max=e - 1)]
    row_scale = torch.where((group < e).unsqueeze(-1), row_scale, torch.ones_like(row_scale))
    return (rows * row_scale).reshape(v.shape), True


def dtype_max(fmt: core.QuantFormat, dst_type_max: float) -> Optional[float]:
    """``DTYPE_MAX`` override: hifloat8 uses ``dst_type_max``, 0 meaning 32768 (the 950 tiling,
    hicann/ops-nn ``quant/dynamic_quant/op_host/dynamic_quant_tiling_arch35.cpp``; the kernels
    then compute ``scale = amax * float32(1 / dstTypeMax)``); None (the format's own maximum)
    for every other format, which ignores ``dst_type_max``."""
    if fmt.name == "hifloat8" and dst_type_max != 0.0:
        return float(dst_type_max)
    return None


def reduce_dims(quant_mode: str, ndim: int) -> tuple[int, ...]:
    if quant_mode == "pertoken":
        return (ndim - 1,)
    if quant_mode == "perchannel":
        return (ndim - 2,)
    return tuple(range(ndim))


def squeeze_scale(t: torch.Tensor, quant_mode: str, dims: tuple[int, ...]) -> torch.Tensor:
    """Scale/offset shapes: pertoken x.shape[:-1], perchannel x.shape without dim -2,
    pertensor (1,)."""
    if quant_mode == "pertensor":
        return t.reshape(1)
    return t.squeeze(dims[0])


def uses_a2_kernel(fmt: core.QuantFormat, quant_mode: str) -> bool:
    """pertoken int8/int4 is what the A2/A3 kernels compute (multiply by the reciprocal);
    everything else exists only on the 950 (divide by the scale)."""
    return quant_mode == "pertoken" and fmt.is_int


def output_key(input, smooth_scales=None, group_index=None, dst_type=None,
               quant_mode="pertoken"):
    """Compiled-provider specialization key (the hidden size included: each width gets its own
    static code, and only the token count turns dynamic)."""
    return (quant_mode, input.shape[-1], input.dtype, input.device.type, dst_type,
            None if smooth_scales is None else smooth_scales.dtype, group_index is None)
