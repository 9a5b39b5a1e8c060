"""torch_npu.npu_dynamic_quant_asymmetric: asymmetric dynamic quantization (per token).

Formula (seed 004)::

    scale  = (rowMax(x) - rowMin(x)) / (DST_MAX - DST_MIN)
    offset = DST_MAX - rowMax(x) / scale
    y      = round(x / scale + offset)

Precision and rounding: see :func:`npu_dynamic_quant_asymmetric`.
"""

from __future__ import annotations

from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from . import _dynamic, core

OP = "npu_dynamic_quant_asymmetric"
SCHEMA = ("npu_dynamic_quant_asymmetric(Tensor input, *, Tensor? smooth_scales=None, "
          "Tensor? group_index=None, int? dst_type=None, str quant_mode='pertoken', "
          "float dst_type_max=0.) -> (Tensor, Tensor, Tensor)")


def check_dynamic_quant_asymmetric(input, *, smooth_scales=None, group_index=None,
                                   dst_type=None, quant_mode="pertoken", dst_type_max=0.0):
    _dynamic.check_dynamic(OP, input, smooth_scales, group_index, dst_type, quant_mode,
                           dst_type_max)


def dynamic_quant_asymmetric_reference(input, *, smooth_scales=None, group_index=None,
                                       dst_type=None, quant_mode="pertoken", dst_type_max=0.0):
    fmt = _dynamic.parse_format(OP, dst_type)
    v, owned = _dynamic.smoothed(input, smooth_scales, group_index, quant_mode)
    dims = _dynamic.reduce_dims(quant_mode, v.dim())
    y, scale, offset = core.dynamic_asymmetric(
        v, fmt, dims, reciprocal=_dynamic.uses_a2_kernel(fmt, quant_mode), owned=owned,
        dtype_max=_dynamic.dtype_max(fmt, dst_type_max))
    return (y, _dynamic.squeeze_scale(scale, quant_mode, dims),
            _dynamic.squeeze_scale(offset, quant_mode, dims))


dynamic_quant_asymmetric_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_dynamic_quant_asymmetric,
                                    reference=dynamic_quant_asymmetric_reference,
                                    metadata_check=True, info=OpInfo(api="torch_npu"))
dynamic_quant_asymmetric_op.forbid_autograd("npu_dynamic_quant_asymmetric has no backward on "
                                            "the NPU")


def npu_dynamic_quant_asymmetric(x=None, *, smooth_scales=None, group_index=None,
                                 dst_type=None, quant_mode="pertoken", dst_type_max=0.0,
                                 **kwargs):
    """Asymmetric dynamic quantization to int8 / int4 with a per-token scale and offset.

    Formula (seed 004; "row" = the last dim, one token)::

        scale  = (rowMax(x) - rowMin(x)) / (DST_MAX - DST_MIN)
        offset = DST_MAX - rowMax(x) / scale
        y      = round(x / scale + offset)

    int8: DST_MAX 127, DST_MIN -128 (range 255); int4: 7, -8 (range 15); float8 and
    hifloat8 (950): +-DTYPE_MAX (range 2 * DTYPE_MAX; hifloat8's DTYPE_MAX is
    ``dst_type_max``, 0 meaning 32768).  With smooth_scales, x is first multiplied by them
    (per MoE group with group_index), exactly as in :func:`npu_dynamic_quant`.

    Parameters
    ----------
    x, smooth_scales, group_index, dst_type, quant_mode, dst_type_max
        As for :func:`npu_dynamic_quant` (``input=`` accepted as an alias of ``x``).  The doc
        lists dst_type ``torch.int8`` (default) and ``torch.quint4x2``; op-plugin also passes
        float8 types and the other quant modes to aclnnDynamicQuantV4 (950).

    Returns
    -------
    (y, scale, offset)
        ``y``: int8 of x's shape, or int32 with last dim H / 8 for int4 (8 results per int32,
        low nibble first).  ``scale`` and ``offset``: float32 of shape ``x.shape[:-1]``
        (``(1,)`` pertensor, x's shape without dim -2 perchannel).

    Constraints
    -----------
    As :func:`npu_dynamic_quant`.  op-plugin's doc says only 'pertoken' is supported; the other
    modes follow aclnnDynamicQuantV4 (950).  Strict mode on A2/A3: pertoken, int8/int4.

    Notes
    -----
    float32 throughout.  pertoken int8/int4 follows the A2/A3 kernel (hicann/ops-nn
    ``quant/dynamic_quant/op_kernel/dynamic_quant.h``, ``GetScaleAndOffset`` and
    ``ComputAsymmetric``)::

        scale  = max((mx - mn) / RANGE, 1e-12)
        offset = DST_MAX - mx / scale
        y      = rint(v * (1 / scale) + offset)           (two float32 roundings, no FMA)

    The other cases follow the 950 kernels (``op_kernel/arch35/``) and the CANN golden:
    ``scale = (mx - mn) * float32(1/RANGE)``, ``y = cast(v / scale + offset)`` (a constant row
    then gives scale 0 and NaN -> 0 results; the A2 kernel's 1e-12 floor avoids that).
    Rounding is half to even and saturating (float8: saturating, half to even, NaN -> +0,
    the kernels' ``SatMode::SAT``; hifloat8: half away from zero, saturating to +-32768,
    NaN -> 0).  op-plugin's
    golden (``test/test_custom_ops/test_npu_dynamic_quant_asymmetric.py``) divides by the scale
    and allows ``atol=1``.  No backward.

    Examples
    --------
    >>> x = torch.tensor([[-1.0, 0.0, 0.5, 1.0]], dtype=torch.float16)
    >>> y, scale, offset = npu_anywhere.npu_dynamic_quant_asymmetric(x)
    >>> y, offset
    (tensor([[-128,    0,   63,  127]], dtype=torch.int8), tensor([-0.5000]))
    """
    if kwargs:
        x = accept_alias(OP, "x", x, "input", kwargs)
    return dynamic_quant_asymmetric_op(x, smooth_scales=smooth_scales,
                                       group_index=group_index, dst_type=dst_type,
                                       quant_mode=quant_mode,
                                       dst_type_max=dst_type_max)


compiled.register(
    dynamic_quant_asymmetric_op,
    key=lambda input, *, smooth_scales=None, group_index=None, dst_type=None,
    quant_mode="pertoken", dst_type_max=0.0: _dynamic.output_key(
        input, smooth_scales, group_index, dst_type, quant_mode))


TORCH_NPU_FUNCTIONS = {"npu_dynamic_quant_asymmetric": npu_dynamic_quant_asymmetric}
