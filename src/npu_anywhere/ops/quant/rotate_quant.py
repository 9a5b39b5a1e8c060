"""torch_npu.npu_rotate_quant: block rotation (``x`` times a ``K x K`` rotation on every
group of K columns) fused with per-token dynamic quantization.

Formula (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_rotate_quant.md`` and its
golden)::

    x_rot = (x.reshape(M, N / K, K) @ rotation).reshape(M, N)
    scale = rowMax(|x_rot|) / DTYPE_MAX
    y     = round(x_rot / scale)

Precision and rounding: see :func:`npu_rotate_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...dtypes import FLOATING
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_rotate_quant"
SCHEMA = ("npu_rotate_quant(Tensor x, Tensor rotation, *, Tensor? alpha=None, int? dst_dtype=None, "
          "int? axis=-1, str? round_mode=\"rint\", int? scale_alg=0, float? dst_type_max=0.0, "
          "bool? transpose_y=False) -> (Tensor, Tensor)")

DST_FORMATS = ("int8", "int4", "float8_e5m2", "float8_e4m3fn")
DST_SPELLED = ("torch.int8", "torch.quint4x2 / torch_npu.int4", "torch.float8_e5m2 (MX)",
               "torch.float8_e4m3fn (MX)", "torch_npu.float4_e2m1fn_x2 (MX)")
ROUND_MODES = ("rint", "round", "floor")
K_RANGE = (16, 1024)
N_RANGE = (128, 16000)
_A2_A3 = frozenset({Product.A2, Product.A3})
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def _format(dst_dtype) -> core.QuantFormat:
    if isinstance(dst_dtype, int) and not isinstance(dst_dtype, bool) \
            and dst_dtype == dtypes.FLOAT4_E2M1FN_X2:
        checks.expect(False, OP, "dst_dtype",
                      "torch.int8 or torch.quint4x2 (the 950's MX outputs are not emulated)",
                      core.describe_code(dst_dtype), NotImplementedError)
    fmt = core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype", allowed=DST_FORMATS,
                              spelled=DST_SPELLED)
    checks.expect(fmt.is_int, OP, "dst_dtype",
                  "torch.int8 or torch.quint4x2 (the 950's MX outputs are not emulated)",
                  core.describe_code(dst_dtype), NotImplementedError)
    return fmt


def _defaults(axis, round_mode, scale_alg, dst_type_max, transpose_y):
    """The schema's optional scalars: None means the default."""
    return (-1 if axis is None else axis, "rint" if round_mode is None else round_mode,
            0 if scale_alg is None else scale_alg, 0.0 if dst_type_max is None else dst_type_max,
            False if transpose_y is None else transpose_y)


def check_rotate_quant(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
                       scale_alg=0, dst_type_max=0.0, transpose_y=False):
    axis, round_mode, scale_alg, dst_type_max, transpose_y = _defaults(
        axis, round_mode, scale_alg, dst_type_max, transpose_y)
    fmt = _format(dst_dtype)
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect_dim(x, 2, OP, "x")
    checks.expect(rotation.dtype == x.dtype, OP, "rotation", lambda: f"the dtype of x ({x.dtype})",
                  lambda: str(rotation.dtype), TypeError)
    checks.expect(rotation.dim() == 2 and rotation.shape[0] == rotation.shape[1], OP, "rotation",
                  "a square 2-D matrix (K, K) (the 3-D form is for the 950's MX outputs)",
                  lambda: f"shape {tuple(rotation.shape)}")
    k = rotation.shape[0]
    n = x.shape[1]
    checks.expect(K_RANGE[0] <= k <= K_RANGE[1], OP, "rotation",
                  f"K in [{K_RANGE[0]}, {K_RANGE[1]}]", lambda: f"shape {tuple(rotation.shape)}",
                  ValueError)
    checks.expect(N_RANGE[0] <= n <= N_RANGE[1] and n % 8 == 0 and n % k == 0, OP, "x",
                  lambda: f"a last dim in [{N_RANGE[0]}, {N_RANGE[1]}] divisible by 8 and by "
                  f"K ({k})", lambda: f"shape {tuple(x.shape)}")
    checks.expect_nonempty(x, OP, "x")
    checks.expect_same_device({"x": x, "rotation": rotation}, OP)
    if alpha is not None:
        checks.expect_dim(alpha, 1, OP, "alpha")
    checks.expect(axis in (-1, 1), OP, "axis", "-1 or 1", axis, ValueError)
    checks.expect_one_of(round_mode, ROUND_MODES, OP, "round_mode")
    checks.expect(scale_alg == 0, OP, "scale_alg", "0 for int8/int4 output", scale_alg,
                  ValueError)
    checks.expect(dst_type_max == 0.0, OP, "dst_type_max", "0.0 for int8/int4 output",
                  dst_type_max, ValueError)
    checks.expect(not transpose_y, OP, "transpose_y", "False (the only supported value)",
                  transpose_y, ValueError)
    product = targets.expect_supported(OP, SUPPORTED)
    if product is None:
        return
    checks.expect(product in _A2_A3, OP, "dst_dtype",
                  lambda: f"an MX format on {product.value} (int8/int4 are A2/A3 only)",
                  fmt.name, ValueError)
    checks.expect(x.dtype in (torch.float16, torch.bfloat16), OP, "x",
                  lambda: f"dtype float16 or bfloat16 on {product.value}", str(x.dtype),
                  TypeError)
    checks.expect(alpha is None, OP, "alpha", lambda: f"None on {product.value}",
                  "a tensor", ValueError)


def rotate_quant_reference(x, rotation, *, alpha=None, dst_dtype=None, axis=-1,
                           round_mode="rint", scale_alg=0, dst_type_max=0.0, transpose_y=False):
    round_mode = "rint" if round_mode is None else round_mode
    fmt = _format(dst_dtype)
    m, n = x.shape
    k = rotation.shape[0]
    blocks = x.reshape(m, n // k, k).to(torch.float32)
    # the rotation is a matmul in x's dtype: float32 accumulation, rounded to x's dtype
    rot = torch.matmul(blocks, rotation.to(torch.float32)).to(x.dtype).reshape(m, n)
    v = rot.to(torch.float32)
    if round_mode == "rint":
        y, scale = core.dynamic_symmetric(v, fmt, -1, reciprocal=True, owned=True)
    else:
        # core.dynamic_symmetric has no round_mode: same steps (the A2/A3 kernel order:
        # y = v * (DTYPE_MAX / amax)), cast with the requested rounding.
        dtype_max = core.max_value(fmt)
        amax = v.abs().amax(dim=-1, keepdim=True)
        scale = amax * core._f32(1.0 / dtype_max)
        t = v.mul_(torch.full_like(amax, dtype_max) / amax)
        y = core.cast_to(t, fmt, round_mode=round_mode, inplace=True)
    return y, scale.squeeze(-1)


rotate_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_rotate_quant,
                        reference=rotate_quant_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
rotate_quant_op.forbid_autograd("npu_rotate_quant has no backward on the NPU")


def npu_rotate_quant(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
                     scale_alg=0, dst_type_max=0.0, transpose_y=False):
    """Rotate every group of K columns of ``x`` by ``rotation`` (K x K), then quantize each
    row dynamically to int8 or int4.

    Formula::

        x_rot = (x.reshape(M, N / K, K) @ rotation).reshape(M, N)
        scale = rowMax(|x_rot|) / DTYPE_MAX              # 127 (int8), 7 (int4)
        y     = round(x_rot / scale)

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted outside strict mode), shape ``(M, N)``
        with N in [128, 16000], divisible by 8 and by K; any strides.
    rotation : Tensor
        ``(K, K)``, x's dtype, K in [16, 1024].
    alpha : Tensor, optional
        1-D; without effect for int8/int4 output (A2/A3 accept only None: strict mode).
    dst_dtype : int or dtype, optional
        ``torch.int8`` (default, also None) or ``torch.quint4x2`` / ``torch_npu.int4`` (int4
        packed into int32).  The 950's MX outputs (``torch.float8_e5m2``,
        ``torch.float8_e4m3fn``, ``torch_npu.float4_e2m1fn_x2``) raise NotImplementedError.
    axis : int
        -1 or 1 (the last dim).
    round_mode : {'rint', 'round', 'floor'}
        Rounding of the integer cast: half to even (default), half away from zero, floor.
    scale_alg : int
        0 (the only value for int output).
    dst_type_max : float
        0.0 (the only value for int output).
    transpose_y : bool
        False (the only supported value).

    Returns
    -------
    (y, scale)
        ``y``: int8 ``(M, N)``, or int32 ``(M, N // 8)`` for int4 (element ``8j + i`` of a
        row in bits ``4i .. 4i+3`` of int32 ``j``).  ``scale``: float32 ``(M,)``.

    Constraints
    -----------
    Strict mode: int8/int4 exist on A2/A3 only (float16/bfloat16 x, alpha None); the 950
    supports the MX outputs only.

    Notes
    -----
    op-plugin's golden (``test/test_custom_ops/test_npu_rotate_quant.py``: ``conv_rot`` then
    ``npu_dynamic_quant``) settles the order: the rotation is a matmul in x's dtype (float32
    accumulation, result rounded to x's dtype), then pertoken dynamic quantization in the
    A2/A3 kernel order (``y = x_rot * (DTYPE_MAX / amax)``, ``scale = amax *
    float32(1 / DTYPE_MAX)``; see ``npu_dynamic_quant``), saturating, NaN -> 0.  The golden
    accepts a difference of 1 (the matmul's accumulation order differs from the NPU's cube
    unit).  Applying ``round_mode`` to the integer cast is our reading of the doc (the
    golden only covers 'rint').  No backward.

    Examples
    --------
    >>> x = torch.randn(4, 128, dtype=torch.bfloat16)
    >>> y, scale = npu_anywhere.npu_rotate_quant(x, torch.eye(16, dtype=torch.bfloat16))
    >>> y.dtype, y.shape, scale.shape
    (torch.int8, torch.Size([4, 128]), torch.Size([4]))
    """
    return rotate_quant_op.overload(x, rotation, alpha=alpha, dst_dtype=dst_dtype, axis=axis,
                                    round_mode=round_mode, scale_alg=scale_alg,
                                    dst_type_max=dst_type_max, transpose_y=transpose_y)


compiled.register(
    rotate_quant_op,
    key=lambda x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
    scale_alg=0, dst_type_max=0.0, transpose_y=False: (x.dtype, x.device.type, dst_dtype,
                                                        round_mode, rotation.shape[0]))


TORCH_NPU_FUNCTIONS = {"npu_rotate_quant": npu_rotate_quant}
