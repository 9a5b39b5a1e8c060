"""torch_npu.npu_dynamic_block_quant: dynamic symmetric quantization per 2-D block.

Formula (CANN ``aclnnDynamicBlockQuant``)::

    input_max = block_reduce_max(abs(x))
    scale     = min(input_max / DTYPE_MAX, 1 / min_scale)
    y         = cast(x / scale)

Precision and rounding: see :func:`npu_dynamic_block_quant`.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_dynamic_block_quant"
SCHEMA = ("npu_dynamic_block_quant(Tensor x, *, float min_scale=0.0, str round_mode=\"rint\", "
          "int dst_type=1, int row_block_size=1, int col_block_size=128, "
          "float dst_type_max=0.0) -> (Tensor y, Tensor scale)")

DST_FORMATS = ("int8", "float8_e4m3fn", "float8_e5m2", "hifloat8")
DST_SPELLED = ("torch.int8 (1)", "torch.float8_e5m2 / torch_npu.float8_e5m2 (23 / 291)",
               "torch.float8_e4m3fn / torch_npu.float8_e4m3fn (24 / 292)",
               "torch_npu.hifloat8 (290)")
ROUND_MODES = ("rint", "round")
ROW_BLOCK_SIZES = (1, 64, 128, 256, 512)
DST_TYPE_MAXES = (0.0, 15.0, 56.0, 224.0, 32768.0)
COL_BLOCK_SIZES = (64, 128, 192, 256)

_A2_A3 = frozenset({Product.A2, Product.A3})
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def _format(dst_type) -> core.QuantFormat:
    return core.parse_dst_type(dst_type, op=OP, param="dst_type", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


_FLOAT32_MAX = torch.finfo(torch.float32).max
_MIN_SCALE_RANGE = "about 2.94e-39 to 3.4e38"


def _float32_with_finite_reciprocal(value: float) -> bool:
    if not value <= _FLOAT32_MAX:
        return False
    v32 = core._f32(value)
    return v32 > 0.0 and 1.0 / v32 <= _FLOAT32_MAX


def check_dynamic_block_quant(x, *, min_scale=0.0, round_mode="rint", dst_type=1,
                              row_block_size=1, col_block_size=128, dst_type_max=0.0):
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect(x.dim() in (2, 3), OP, "x", "2 or 3 dims", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    checks.expect_nonempty(x, OP, "x")
    checks.expect(not math.isnan(min_scale) and min_scale >= 0.0, OP, "min_scale",
                  "a value >= 0", min_scale, ValueError)
    # The kernel holds min_scale and the cap 1 / min_scale as float32: both must be finite and
    # non-zero there, or the cap is inf / 0 (a 1e-300 rounds to 0, a 1e300 to inf).
    checks.expect(min_scale == 0.0 or _float32_with_finite_reciprocal(min_scale), OP,
                  "min_scale", "0, or a value whose float32 rounding and its float32 "
                  f"reciprocal are finite and non-zero ({_MIN_SCALE_RANGE})", min_scale,
                  ValueError)
    checks.expect_one_of(round_mode, ROUND_MODES, OP, "round_mode")
    checks.expect_one_of(row_block_size, ROW_BLOCK_SIZES, OP, "row_block_size")
    checks.expect_one_of(col_block_size, COL_BLOCK_SIZES, OP, "col_block_size")
    checks.expect(not math.isnan(dst_type_max) and dst_type_max >= 0.0, OP, "dst_type_max",
                  "a value >= 0 (used by hifloat8 only)", dst_type_max, ValueError)
    checks.expect(dst_type_max in DST_TYPE_MAXES, OP, "dst_type_max",
                  f"one of {list(DST_TYPE_MAXES)}", dst_type_max, ValueError)
    # "round" is for hifloat8, which takes nothing else (aclnnDynamicBlockQuant, 950
    # constraints; dynamic_block_quant_tiling.cpp CheckRoundMode).
    fmt = _format(dst_type)
    if fmt.name == "hifloat8":
        checks.expect(round_mode == "round", OP, "round_mode", "'round' for hifloat8 output",
                      repr(round_mode), ValueError)
    else:
        checks.expect(round_mode == "rint", OP, "round_mode",
                      lambda: f"'rint' for {fmt.name} output ('round' is for hifloat8 only)",
                      repr(round_mode), ValueError)
        checks.expect(dst_type_max == 0.0, OP, "dst_type_max",
                      lambda: f"0 for {fmt.name} output (it sets hifloat8's maximum)",
                      dst_type_max, ValueError)
    product = targets.expect_supported(OP, SUPPORTED)
    if product is None:
        return
    if product in _A2_A3:
        checks.expect(x.dtype in (torch.float16, torch.bfloat16), OP, "x",
                      lambda: f"dtype float16 or bfloat16 on {product.value}", str(x.dtype),
                      TypeError)
        checks.expect(fmt.name == "int8", OP, "dst_type",
                      lambda: f"torch.int8 (1) on {product.value}", fmt.name, ValueError)
        checks.expect(row_block_size == 1, OP, "row_block_size",
                      lambda: f"1 on {product.value}", row_block_size, ValueError)
        checks.expect(col_block_size == 128, OP, "col_block_size",
                      lambda: f"128 on {product.value}", col_block_size, ValueError)


def dynamic_block_quant_reference(x, *, min_scale=0.0, round_mode="rint", dst_type=1,
                                  row_block_size=1, col_block_size=128, dst_type_max=0.0):
    fmt = _format(dst_type)
    dtype_max = core.max_value(fmt)
    if fmt.name == "hifloat8" and dst_type_max != 0.0:
        dtype_max = dst_type_max
    r, c = row_block_size, col_block_size
    v = x.to(torch.float32)
    if v.dim() == 2:
        v = v.unsqueeze(0)
    b, m, n = v.shape
    mb, nb = -(-m // r), -(-n // c)
    # zero padding does not change max|x| (the kernels mask the tail instead)
    padded = torch.nn.functional.pad(v, (0, nb * c - n, 0, mb * r - m))
    amax = padded.reshape(b, mb, r, nb, c).abs().amax(dim=(2, 4))           # (b, mb, nb)
    scale = amax / dtype_max                                                 # float32 divide
    # min(scale, 1 / min_scale), applied only where scale < inf (NaN / inf pass through);
    # min_scale 0 (1 / 0 = inf) leaves the scale unchanged.
    if min_scale > 0.0:
        # float32(1 / float32(min_scale)): double rounding is innocuous for a division
        bound = core._f32(1.0 / core._f32(min_scale))
        scale = torch.where(scale < float("inf"), scale.clamp(max=bound), scale)
    # each element's block scale, by index (no slicing of a padded result: Inductor
    # miscompiles pad -> reduce -> slice -> contiguous in torch 2.13)
    rows = torch.arange(m, device=v.device) // r
    cols = torch.arange(n, device=v.device) // c
    per_elem = scale[:, rows][:, :, cols]                                    # (b, m, n)
    y = core.cast_to(v / per_elem, fmt, round_mode=round_mode, inplace=True)
    if x.dim() == 2:
        y, scale = y[0], scale[0]
    return y.contiguous(), scale


dynamic_block_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dynamic_block_quant,
                               reference=dynamic_block_quant_reference, metadata_check=True,
                               info=OpInfo(api="torch_npu"))
dynamic_block_quant_op.forbid_autograd("npu_dynamic_block_quant has no backward on the NPU")


def npu_dynamic_block_quant(x, *, min_scale=0.0, round_mode="rint", dst_type=1,
                            row_block_size=1, col_block_size=128, dst_type_max=0.0):
    """Dynamic symmetric quantization with one scale per ``row_block_size x col_block_size``
    block of the last two dims.

    Formula (CANN ``aclnnDynamicBlockQuant``; ``DTYPE_MAX`` = 127 for int8, 448 for
    float8_e4m3fn, 57344 for float8_e5m2, ``dst_type_max`` or else 32768 for hifloat8)::

        input_max = block_reduce_max(abs(x))
        scale     = min(input_max / DTYPE_MAX, 1 / min_scale)
        y         = cast(x / scale)

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted: aclnn lists it), 2 dims ``(M, N)`` or 3
        dims ``(B, M, N)``, non-empty, any strides.
    min_scale : float
        >= 0.  Caps the scale at ``1 / min_scale`` (0, the default, caps nothing).
    round_mode : {'rint', 'round'}
        'rint' (round half to even) for int8 and float8 output; 'round' (half away from zero)
        for hifloat8 output.  Each format takes only its own mode.
    dst_type : int or dtype
        ``1`` / ``torch.int8`` (default), ``torch.float8_e5m2`` (23, torch_npu code 291),
        ``torch.float8_e4m3fn`` (24, 292), ``torch_npu.hifloat8`` (290).
    row_block_size : int
        Block rows: 1, 64, 128, 256 or 512.
    col_block_size : int
        Block columns: 64, 128, 192 or 256.
    dst_type_max : float
        op-plugin's extra argument: hifloat8's ``DTYPE_MAX``, one of 0 (meaning 32768), 15,
        56, 224, 32768; other formats need 0 (``dynamic_block_quant_tiling.cpp``
        ``CheckBlockSizeAndDstTypeMax``).

    Returns
    -------
    (y, scale)
        ``y``: x's shape, int8 / float8 (hifloat8: uint8 holding the codes).  ``scale``:
        float32, ``(ceil(M / row_block_size), ceil(N / col_block_size))`` (with a leading B
        for 3-D x).  Partial blocks at the ends are quantized on their own elements.

    Constraints
    -----------
    Strict mode: A2/A3 accept float16/bfloat16 x, int8 output, rint, row_block_size 1 and
    col_block_size 128 only (the torch_npu page lists just these); the 950 accepts the rest.

    Notes
    -----
    Computed in float32 in the 950 kernel's order (hicann/ops-nn
    ``quant/dynamic_block_quant/op_kernel/arch35/dynamic_block_quant_single_row_kernel.h``):
    ``amax`` of the block (exact), ``scale = amax / DTYPE_MAX`` (a division, not a multiply by
    the reciprocal), then ``scale = min(scale, 1 / min_scale)`` only where ``scale < inf``,
    then ``y = x / scale`` (a division per element).  int8: rounded half to even
    (CAST_RINT), saturated to [-128, 127], NaN -> 0; float8: round half to even, saturating
    (``SatMode::SAT``), NaN -> +0 (the saturation mode's rule, which the CANN golden
    ``quant/dynamic_block_quant/tests/assets/golden.py`` applies: "NPU will cast NaN ... to
    positive ZERO"); hifloat8: half away from zero (CAST_ROUND), saturating to +-32768,
    NaN -> 0 (``npu_anywhere.ops.quant.hifloat8``).  ``x / scale`` for a block's largest
    element is ``+-DTYPE_MAX`` up to one float32 rounding.  An all-zero block gives scale 0
    and ``0 / 0`` = NaN, so y 0 for every format.  A block containing inf has scale inf (its
    finite elements quantize to 0, the inf itself, inf / inf = NaN, to 0) and one containing
    NaN scale NaN and y 0: the kernel's block max compares the bit patterns of ``|x|``, in
    which NaN > inf > any finite value.  (The CANN golden instead leaves inf/NaN out of the
    block max and then saturates inf to ``+-DTYPE_MAX``.)

    The torch_npu doc page writes the scale formula inverted (``min(DTYPE_MAX / input_max,
    1 / min_scale)``); its example output (scale 0.0063 for values below 1) and the aclnn doc
    settle ``input_max / DTYPE_MAX``.  Shapes: op-plugin ``_meta_registrations.py``
    ``npu_dynamic_block_quant_meta`` and ``aclnnDynamicBlockQuant.md`` (ceil division).
    op-plugin's golden (``test/test_custom_ops/test_npu_dynamic_block_quant.py``) multiplies by
    ``127 / amax`` instead of dividing by the scale (differs in the last float32 bit, i.e.
    near .5 ties) and reshapes the 3-D scale wrongly; no backward.

    Examples
    --------
    >>> x = torch.tensor([[1.0, -2.0, 0.5, 4.0]], dtype=torch.float16)
    >>> y, scale = npu_anywhere.npu_dynamic_block_quant(x)
    >>> y
    tensor([[ 32, -64,  16, 127]], dtype=torch.int8)
    """
    return dynamic_block_quant_op(x, min_scale=min_scale, round_mode=round_mode,
                                  dst_type=dst_type, row_block_size=row_block_size,
                                  col_block_size=col_block_size,
                                  dst_type_max=dst_type_max)


compiled.register(
    dynamic_block_quant_op,
    key=lambda x, *, min_scale=0.0, round_mode="rint", dst_type=1, row_block_size=1,
    col_block_size=128, dst_type_max=0.0: (x.dtype, x.device.type, x.dim(), dst_type,
                                           round_mode, row_block_size, col_block_size))


TORCH_NPU_FUNCTIONS = {"npu_dynamic_block_quant": npu_dynamic_block_quant}
