"""torch_npu.npu_dynamic_quant: symmetric dynamic quantization (per token by default).

Formula (seed 004)::

    scale = rowMax(abs(x * smooth_scales)) / DTYPE_MAX
    y     = round(x * smooth_scales / scale)

Precision and rounding: see :func:`npu_dynamic_quant`.
"""

from __future__ import annotations

from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from . import _dynamic, core

OP = "npu_dynamic_quant"
SCHEMA = ("npu_dynamic_quant(Tensor input, *, Tensor? smooth_scales=None, "
          "Tensor? group_index=None, int? dst_type=None, str quant_mode='pertoken', "
          "float dst_type_max=0.) -> (Tensor, Tensor)")


def check_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None,
                        quant_mode="pertoken", dst_type_max=0.0):
    _dynamic.check_dynamic(OP, input, smooth_scales, group_index, dst_type, quant_mode,
                           dst_type_max)


def dynamic_quant_reference(input, *, smooth_scales=None, group_index=None, dst_type=None,
                            quant_mode="pertoken", dst_type_max=0.0):
    fmt = _dynamic.parse_format(OP, dst_type)
    v, owned = _dynamic.smoothed(input, smooth_scales, group_index, quant_mode)
    dims = _dynamic.reduce_dims(quant_mode, v.dim())
    y, scale = core.dynamic_symmetric(v, fmt, dims, owned=owned,
                                      reciprocal=_dynamic.uses_a2_kernel(fmt, quant_mode),
                                      dtype_max=_dynamic.dtype_max(fmt, dst_type_max))
    return y, _dynamic.squeeze_scale(scale, quant_mode, dims)


dynamic_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dynamic_quant,
                         reference=dynamic_quant_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu"))
dynamic_quant_op.forbid_autograd("npu_dynamic_quant has no backward on the NPU")


def npu_dynamic_quant(x=None, *, smooth_scales=None, group_index=None, dst_type=None,
                      quant_mode="pertoken", dst_type_max=0.0, **kwargs):
    """Symmetric dynamic quantization to int8 / int4 (and float8, hifloat8 on the 950).

    Formula (seed 004; ``rowMax`` over the last dim in the default ``"pertoken"`` mode)::

        scale = rowMax(abs(x * smooth_scales)) / DTYPE_MAX
        y     = round(x * smooth_scales / scale)

    ``DTYPE_MAX`` is 127 (int8), 7 (int4), 448 (float8_e4m3fn), 57344 (float8_e5m2),
    ``dst_type_max`` or else 32768 (hifloat8).

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted outside strict mode), more than 1 dim,
        any strides.  ``input=`` (op-plugin's name) is accepted as an alias.
    smooth_scales : Tensor, optional
        Any float dtype (the doc requires x's dtype in single-op mode; strict mode enforces
        it).  Shape ``(H,)`` with H the last dim of x (``(x.shape[-2],)`` in perchannel
        mode), or ``(E, H)`` with ``group_index`` (MoE, 1 <= E <= 1024).
    group_index : Tensor, optional
        int32 ``(E,)``, cumulative row ends: ``smooth_scales[i]`` scales rows
        ``group_index[i-1] <= r < group_index[i]`` of x viewed as (rows, H).  Must be
        non-decreasing with last entry == rows (not checked: it is data; other values give
        unspecified results, as on the NPU; rows past the last entry stay unscaled).
    dst_type : dtype or int, optional
        ``torch.int8`` (default, also None), ``torch.quint4x2`` / ``torch_npu.int4`` (int4,
        packed), ``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` (or torch_npu's codes 292 /
        291; 950 only), ``torch_npu.hifloat8`` (290; 950 only).
    quant_mode : {'pertoken', 'pertensor', 'perchannel'}
        op-plugin's extra argument (aclnnDynamicQuantV3/V4, 950 only besides 'pertoken'):
        the max is taken per row, over the whole tensor, or per column (over dim -2).
    dst_type_max : float
        op-plugin's extra argument; in [0, 32768]: hifloat8's ``DTYPE_MAX`` (0 means 32768);
        ignored by the other formats.

    Returns
    -------
    (y, scale)
        ``y``: int8 / float8 of x's shape (hifloat8: uint8 holding the codes); for int4 an
        int32 tensor whose last dim is H / 8, each int32 holding 8 results (element ``8k + j`` in bits ``4j..4j+3``, low nibble
        first).  ``scale``: float32 of shape ``x.shape[:-1]`` (pertoken), x's shape without
        dim -2 (perchannel) or ``(1,)`` (pertensor).

    Constraints
    -----------
    int4 needs H divisible by 8.  group_index needs smooth_scales and pertoken mode.  Strict
    mode: A2/A3 take float16/bfloat16 x, smooth_scales of x's dtype, int8/int4 and pertoken
    only; the 950 adds the float8 / hifloat8 outputs and the other modes.

    Notes
    -----
    Computed in float32: ``v = float32(x) * float32(smooth_scales)``, ``amax = max|v|``,
    ``scale = amax * float32(1/DTYPE_MAX)``.  For pertoken int8/int4 (the A2/A3 kernels,
    hicann/ops-nn ``quant/dynamic_quant/op_kernel/dynamic_quant.h`` and siblings)
    ``y = rint(v * (DTYPE_MAX / amax))``; otherwise (the 950 kernels, ``op_kernel/arch35/``,
    and the CANN golden ``quant/dynamic_quant/tests/assets/golden.py``) ``y = v / scale``.
    Rounding is half to even (``CAST_RINT``; op-plugin's golden uses ``torch.round``), so
    ``x * 127 / amax == 2.5`` gives 2 and ``3.5`` gives 4.  The two operation orders differ in
    the last float32 bit, so near a tie (about one element in 10^4 for random data) the NPU's
    A2 and 950 kernels -- and the golden -- can disagree by 1; op-plugin's tests allow
    ``atol=1``.  The A2/A3 kernels also write the scale as either ``amax * (1/127)`` or
    ``1 / (127 / amax)`` depending on the tiling path (the last bit may differ); we use the
    former, as the golden does.  Integer results saturate; float8 results saturate to the
    largest finite value, map NaN to +0 and round half to even (``castTraitF32tofp8``:
    CAST_RINT, ``SatMode::SAT``); hifloat8 results round
    half away from zero (``castTraitF32toh8``: CAST_ROUND, ``SatMode::SAT``) and saturate to
    +-32768 (NaN -> 0).  An all-zero row gives
    scale 0 and y 0.  A row containing inf gets scale inf; its finite elements quantize to 0
    and the inf element (inf / inf = NaN) to 0; NaN anywhere in a row makes its scale NaN and
    its y 0 (every format).  No backward.

    Examples
    --------
    >>> x = torch.tensor([[0.5, -1.0, 0.25, 2.0]], dtype=torch.float16)
    >>> y, scale = npu_anywhere.npu_dynamic_quant(x)
    >>> y
    tensor([[ 32, -64,  16, 127]], dtype=torch.int8)
    """
    if kwargs:
        x = accept_alias(OP, "x", x, "input", kwargs)
    return dynamic_quant_op(x, smooth_scales=smooth_scales, group_index=group_index,
                            dst_type=dst_type, quant_mode=quant_mode,
                            dst_type_max=dst_type_max)


# -- fast providers --------------------------------------------------------------------------

compiled.register(
    dynamic_quant_op,
    key=lambda input, *, smooth_scales=None, group_index=None, dst_type=None,
    quant_mode="pertoken", dst_type_max=0.0: _dynamic.output_key(
        input, smooth_scales, group_index, dst_type, quant_mode))


TORCH_NPU_FUNCTIONS = {"npu_dynamic_quant": npu_dynamic_quant}
