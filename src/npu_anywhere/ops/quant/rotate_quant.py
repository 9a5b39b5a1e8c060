"""torch_npu.npu_rotate_quant: block rotation (``x`` times a ``K x K`` rotation on every
group of K columns) fused with dynamic quantization: per-token int8/int4 (Atlas A2/A3) or MX
float8/float4 (Ascend 950).

Formula (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_rotate_quant.md`` and its
golden ``test/test_custom_ops/test_npu_rotate_quant.py``)::

    x_rot = (x.reshape(-1, N / K, K) @ rotation).reshape(x.shape)      # in x's dtype
    int8/int4:  scale = rowMax(|x_rot|) / DTYPE_MAX;  y = round(x_rot / scale)
    MX:         y, scale = DynamicMxQuant(x_rot, block 32)               # see ops/quant/mx.py

Precision and rounding: see :func:`npu_rotate_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...dtypes import FLOATING
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core, mx

OP = "npu_rotate_quant"
SCHEMA = ("npu_rotate_quant(Tensor x, Tensor rotation, *, Tensor? alpha=None, int? dst_dtype=None, "
          "int? axis=-1, str? round_mode=\"rint\", int? scale_alg=0, float? dst_type_max=0.0, "
          "bool? transpose_y=False) -> (Tensor, Tensor)")

INT_FORMATS = ("int8", "int4")
FLOAT8_FORMATS = ("float8_e5m2", "float8_e4m3fn")
DST_SPELLED = ("torch.int8", "torch.quint4x2 / torch_npu.int4", "torch.float8_e5m2 (MX)",
               "torch.float8_e4m3fn (MX)", "torch_npu.float4_e2m1fn_x2 (MX)")
ROUND_MODES = ("rint", "round", "floor")
K_RANGE = (16, 1024)                 # Atlas A2/A3 (int8/int4 output)
N_RANGE = (128, 16000)               # Atlas A2/A3
MX_K = (32, 64, 128)                 # Ascend 950 (MX output)
MX_MAX_DIMS = 7
MX_SCALE_ALGS = {"float8_e5m2": (0, 1), "float8_e4m3fn": (0, 1), "float4_e2m1": (0, 2)}
DST_TYPE_MAX_RANGE = (6.0, 12.0)     # scale_alg 2
_A2_A3 = frozenset({Product.A2, Product.A3})
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def _format(dst_dtype) -> core.QuantFormat | mx.MXFormat:
    """int8/int4 as a core.QuantFormat, the MX outputs as an mx.MXFormat."""
    if isinstance(dst_dtype, int) and not isinstance(dst_dtype, bool) \
            and dst_dtype == dtypes.FLOAT4_E2M1FN_X2:
        return mx.FORMATS["float4_e2m1"]
    fmt = core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype",
                              allowed=INT_FORMATS + FLOAT8_FORMATS, spelled=DST_SPELLED)
    return fmt if fmt.is_int else mx.FORMATS[fmt.name]


def _defaults(axis, round_mode, scale_alg, dst_type_max, transpose_y):
    """The schema's optional scalars: None means the default."""
    return (-1 if axis is None else axis, "rint" if round_mode is None else round_mode,
            0 if scale_alg is None else scale_alg, 0.0 if dst_type_max is None else dst_type_max,
            False if transpose_y is None else transpose_y)


def _check_int_shapes(x, rotation):
    """The A2/A3 shapes: 2-D x, (K, K) rotation with K in [16, 1024], N in [128, 16000]."""
    checks.expect_dim(x, 2, OP, "x")
    checks.expect(rotation.dim() == 2 and rotation.shape[0] == rotation.shape[1], OP,
                  "rotation",
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


def _check_mx_shapes(x, rotation):
    """The 950 shapes: x with 1..7 dims, rotation (K, K) or (N / K, K, K), K in {32, 64, 128},
    K dividing N."""
    checks.expect(1 <= x.dim() <= MX_MAX_DIMS, OP, "x",
                  f"1 to {MX_MAX_DIMS} dims for MX output", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    checks.expect(rotation.dim() in (2, 3) and rotation.shape[-1] == rotation.shape[-2], OP,
                  "rotation", "(K, K) or (N / K, K, K) for MX output",
                  lambda: f"shape {tuple(rotation.shape)}")
    k = rotation.shape[-1]
    n = x.shape[-1]
    checks.expect(k in MX_K, OP, "rotation", f"K in {list(MX_K)} for MX output",
                  lambda: f"shape {tuple(rotation.shape)}", ValueError)
    checks.expect(n % k == 0, OP, "x", lambda: f"a last dim divisible by K ({k})",
                  lambda: f"shape {tuple(x.shape)}")
    if rotation.dim() == 3:
        checks.expect(rotation.shape[0] * k == n, OP, "rotation",
                      lambda: f"N / K = {n // k} matrices in its first dim",
                      lambda: f"shape {tuple(rotation.shape)}")


def _check_mx_scalars(fmt, x, round_mode, scale_alg, dst_type_max, axis):
    checks.expect(axis in (-1, x.dim() - 1), OP, "axis",
                  lambda: f"-1 or {x.dim() - 1} (the last dim)", axis, ValueError)
    if fmt.name != "float4_e2m1":
        checks.expect(round_mode == "rint", OP, "round_mode", "'rint' for float8 output",
                      repr(round_mode), ValueError)
    algs = MX_SCALE_ALGS[fmt.name]
    checks.expect(scale_alg in algs, OP, "scale_alg",
                  lambda: f"one of {list(algs)} for {fmt.name} output", scale_alg, ValueError)
    lo, hi = DST_TYPE_MAX_RANGE
    if scale_alg == 2:
        checks.expect(dst_type_max == 0.0 or lo <= dst_type_max <= hi, OP, "dst_type_max",
                      f"0.0 or a value in [{lo}, {hi}] for scale_alg 2", dst_type_max,
                      ValueError)
    else:
        checks.expect(dst_type_max == 0.0, OP, "dst_type_max",
                      "0.0 unless scale_alg is 2", dst_type_max, ValueError)


def _check_product(fmt, x, alpha, scale_alg, dst_type_max):
    product = targets.expect_supported(OP, SUPPORTED)
    if product is None:
        return
    is_mx = isinstance(fmt, mx.MXFormat)
    if product in _A2_A3:
        checks.expect(not is_mx, OP, "dst_dtype",
                      lambda: f"torch.int8 or torch.quint4x2 on {product.value} (the MX formats "
                      "are Ascend 950 only)", fmt.name, ValueError)
    else:
        checks.expect(is_mx, OP, "dst_dtype",
                      lambda: f"an MX format on {product.value} (int8/int4 are A2/A3 only)",
                      fmt.name, ValueError)
    checks.expect(x.dtype in (torch.float16, torch.bfloat16), OP, "x",
                  lambda: f"dtype float16 or bfloat16 on {product.value}", str(x.dtype),
                  TypeError)
    if product in _A2_A3:
        checks.expect(alpha is None, OP, "alpha", lambda: f"None on {product.value}",
                      "a tensor", ValueError)
    elif scale_alg == 2:
        lo, hi = DST_TYPE_MAX_RANGE
        checks.expect(lo <= dst_type_max <= hi, OP, "dst_type_max",
                      lambda: f"a value in [{lo}, {hi}] for scale_alg 2 on {product.value}",
                      dst_type_max, ValueError)


def check_rotate_quant(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
                       scale_alg=0, dst_type_max=0.0, transpose_y=False):
    axis, round_mode, scale_alg, dst_type_max, transpose_y = _defaults(
        axis, round_mode, scale_alg, dst_type_max, transpose_y)
    fmt = _format(dst_dtype)
    is_mx = isinstance(fmt, mx.MXFormat)
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect(rotation.dtype == x.dtype, OP, "rotation", lambda: f"the dtype of x ({x.dtype})",
                  lambda: str(rotation.dtype), TypeError)
    if is_mx:
        _check_mx_shapes(x, rotation)
    else:
        _check_int_shapes(x, rotation)
    checks.expect_nonempty(x, OP, "x")
    checks.expect_same_device({"x": x, "rotation": rotation}, OP)
    if alpha is not None:
        checks.expect_dim(alpha, 1, OP, "alpha")
        checks.expect_same_device({"x": x, "alpha": alpha}, OP)
        if is_mx:
            checks.expect_dtype(alpha, dtypes.FLOATING_OR_DOUBLE, OP, "alpha")
    checks.expect_one_of(round_mode, ROUND_MODES, OP, "round_mode")
    if is_mx:
        _check_mx_scalars(fmt, x, round_mode, scale_alg, dst_type_max, axis)
    else:
        checks.expect(axis in (-1, 1), OP, "axis", "-1 or 1", axis, ValueError)
        checks.expect(scale_alg == 0, OP, "scale_alg", "0 for int8/int4 output", scale_alg,
                      ValueError)
        checks.expect(dst_type_max == 0.0, OP, "dst_type_max", "0.0 for int8/int4 output",
                      dst_type_max, ValueError)
    checks.expect(not transpose_y, OP, "transpose_y", "False (the only supported value)",
                  transpose_y, ValueError)
    _check_product(fmt, x, alpha, scale_alg, dst_type_max)


def _rotate(x, rotation):
    """``x`` (..., N) times ``rotation`` on every group of K columns (the 3-D form: group ``b``
    by ``rotation[b]``); float32 accumulation, result in x's dtype, shape of ``x``."""
    n = x.shape[-1]
    k = rotation.shape[-1]
    blocks = x.reshape(-1, n // k, k).to(torch.float32)
    rot = rotation.to(torch.float32)
    if rotation.dim() == 2:
        out = torch.matmul(blocks, rot)
    else:
        out = torch.matmul(blocks.transpose(0, 1), rot).transpose(0, 1)
    return out.to(x.dtype).reshape(x.shape)


def _clip_to_alpha(v, alpha):
    """The 950's alpha: if ``0 < alpha[0] < 1``, clamp every group of 32 values of ``v`` (the
    MX blocks) to ``+-alpha[0] * max |group|`` (that limit rounded to v's dtype)."""
    a = alpha.reshape(-1)[:1].to(torch.float32)
    groups = v.to(torch.float32).reshape(-1, mx.BLOCK_SIZE)
    limit = (a * groups.abs().amax(dim=-1, keepdim=True)).to(v.dtype).to(torch.float32)
    clipped = torch.clamp(groups, -limit, limit)
    use = (a > 0) & (a < 1)
    return torch.where(use, clipped, groups).to(v.dtype).reshape(v.shape)


def _reference(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
               scale_alg=0, dst_type_max=0.0, transpose_y=False):
    """The semantics, with the MX scale as uint8 e8m0 codes (Inductor cannot emit
    float8_e8m0fnu; :func:`rotate_quant_reference` reinterprets it)."""
    _, round_mode, scale_alg, dst_type_max, _ = _defaults(axis, round_mode, scale_alg,
                                                          dst_type_max, transpose_y)
    fmt = _format(dst_dtype)
    rot = _rotate(x, rotation)
    if isinstance(fmt, mx.MXFormat):
        if alpha is not None and alpha.numel() > 0:
            rot = _clip_to_alpha(rot, alpha)
        return mx.quantize(rot, fmt, round_mode=round_mode, scale_alg=scale_alg,
                           dst_type_max=float(dst_type_max))
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


def _as_e8m0(out):
    y, scale = out
    return y, (scale.view(torch.float8_e8m0fnu) if scale.dtype == torch.uint8 else scale)


def rotate_quant_reference(x, rotation, *, alpha=None, dst_dtype=None, axis=-1,
                           round_mode="rint", scale_alg=0, dst_type_max=0.0, transpose_y=False):
    return _as_e8m0(_reference(x, rotation, alpha=alpha, dst_dtype=dst_dtype, axis=axis,
                               round_mode=round_mode, scale_alg=scale_alg,
                               dst_type_max=dst_type_max, transpose_y=transpose_y))


rotate_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_rotate_quant,
                        reference=rotate_quant_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
rotate_quant_op.forbid_autograd("npu_rotate_quant has no backward on the NPU")


def npu_rotate_quant(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
                     scale_alg=0, dst_type_max=0.0, transpose_y=False):
    """Rotate every group of K columns of ``x`` by ``rotation`` (K x K), then quantize:
    per row to int8/int4 (Atlas A2/A3), or in MX blocks of 32 to float8/float4 (Ascend 950).

    Formula::

        x_rot = (x.reshape(-1, N / K, K) @ rotation).reshape(x.shape)
        int8/int4:  scale = rowMax(|x_rot|) / DTYPE_MAX        # 127 (int8), 7 (int4)
                    y     = round(x_rot / scale)
        MX:         per block of 32 along the last dim (x_rot first clamped to
                    +-alpha * max|block| when 0 < alpha[0] < 1),
                    shared_exp = floor(log2(max_i |V_i|)) - emax   # scale_alg 0
                    scale = 2^shared_exp  (float8_e8m0)
                    P_i   = cast_to_dst_type(V_i / scale, round_mode)

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted outside strict mode), any strides.
        int8/int4: shape ``(M, N)``, N in [128, 16000], divisible by 8 and by K.  MX: 1 to 7
        dims, the last (N) divisible by K.
    rotation : Tensor
        x's dtype.  int8/int4: ``(K, K)``, K in [16, 1024].  MX: ``(K, K)`` or
        ``(N / K, K, K)`` (group ``b`` of every row rotated by ``rotation[b]``), K in
        {32, 64, 128}.
    alpha : Tensor, optional
        1-D.  int8/int4: without effect (A2/A3 accept only None: strict mode).  MX: if
        ``0 < alpha[0] < 1``, every block of 32 values of ``x_rot`` is clamped to
        ``+-alpha[0] * max |block|`` before quantization; otherwise (also None or empty) no
        effect.
    dst_dtype : int or dtype, optional
        ``torch.int8`` (default, also None), ``torch.quint4x2`` / ``torch_npu.int4`` (int4
        packed into int32), or the MX formats ``torch.float8_e5m2`` (also 291),
        ``torch.float8_e4m3fn`` (also 292), ``torch_npu.float4_e2m1fn_x2`` (296).
    axis : int
        The last dim: -1 or ``x.dim() - 1``.
    round_mode : {'rint', 'round', 'floor'}
        Rounding of the cast: half to even (default), half away from zero, toward -inf.
        float8 output: 'rint' only.
    scale_alg : int
        int8/int4: 0.  float8: 0 (OCP) or 1 (``2^ceil(log2(amax / DTYPE_MAX))``, cuBLAS
        style).  float4: 0 or 2 (``dst_type_max`` as the block maximum's target).
    dst_type_max : float
        0.0, except with scale_alg 2: a value in [6.0, 12.0] (0.0 means 6.0 outside strict
        mode, as in aclnnDynamicMxQuantV3).
    transpose_y : bool
        False (the only supported value).

    Returns
    -------
    (y, scale)
        int8: ``y`` int8 ``(M, N)``; int4: int32 ``(M, N // 8)`` (element ``8j + i`` of a row
        in bits ``4i .. 4i+3`` of int32 ``j``); ``scale`` float32 ``(M,)``.
        float8: ``y`` float8 of x's shape; float4: uint8 ``(..., N // 2)``, two float4_e2m1
        codes per byte (element ``2i`` in the low nibble).  MX ``scale``:
        ``torch.float8_e8m0fnu`` of shape ``(..., ceil(N / 64), 2)`` -- the scale of block
        ``j`` of a row at ``[..., j // 2, j % 2]``, an odd block count padded with code 0.

    Constraints
    -----------
    The int8/int4 outputs exist on Atlas A2/A3 only (float16/bfloat16 x, 2-D x, alpha None);
    the Ascend 950 supports the MX outputs only (K in {32, 64, 128}; float8: round_mode
    'rint', scale_alg 0/1; float4: scale_alg 0/2; dst_type_max in [6, 12] with scale_alg 2).
    Strict mode enforces the product's rules.

    Notes
    -----
    op-plugin's goldens (``test/test_custom_ops/test_npu_rotate_quant.py``) settle the order:
    the rotation is a matmul with float32 accumulation whose result is rounded to x's dtype
    (the golden accepts a difference of 1 for int8: the NPU's cube unit sums in another
    order); then int8/int4: ``npu_dynamic_quant`` in the A2/A3 kernel order (``y = x_rot *
    (DTYPE_MAX / amax)``, ``scale = amax * float32(1 / DTYPE_MAX)``), saturating, NaN -> 0;
    MX: the alpha clamp (``limit = alpha[0] * groupMax`` in x's dtype), then
    ``npu_dynamic_mx_quant(x_rot, axis=-1, block_size=32, ...)``, whose bit-level rules
    (exponent-field scales, blocks with scale code 0 written as zeros, inf/NaN blocks: scale
    code 255 and y = +0, saturation, single rounding, -0 kept) are in
    :mod:`npu_anywhere.ops.quant.mx`.  Applying ``round_mode`` to the int8/int4 cast is our
    reading of the doc (the golden only covers 'rint').  The doc calls the MX scale "uint8
    holding float8_e8m0"; op-plugin's meta function and the C++ wrapper return
    ``float8_e8m0fnu``, as we do (``scale.view(torch.uint8)`` gives the codes).  No backward.

    Examples
    --------
    >>> x = torch.randn(4, 128, dtype=torch.bfloat16)
    >>> y, scale = npu_anywhere.npu_rotate_quant(x, torch.eye(16, dtype=torch.bfloat16))
    >>> y.dtype, y.shape, scale.shape
    (torch.int8, torch.Size([4, 128]), torch.Size([4]))
    >>> y, scale = npu_anywhere.npu_rotate_quant(x, torch.eye(32, dtype=torch.bfloat16),
    ...                                          dst_dtype=296)
    >>> y.dtype, y.shape, scale.dtype, scale.shape
    (torch.uint8, torch.Size([4, 64]), torch.float8_e8m0fnu, torch.Size([4, 2, 2]))
    """
    return rotate_quant_op(x, rotation, alpha=alpha, dst_dtype=dst_dtype, axis=axis,
                           round_mode=round_mode, scale_alg=scale_alg,
                           dst_type_max=dst_type_max, transpose_y=transpose_y)


def _compile_key(x, rotation, *, alpha=None, dst_dtype=None, axis=-1, round_mode="rint",
                 scale_alg=0, dst_type_max=0.0, transpose_y=False):
    return (x.dtype, x.device.type, dst_dtype, round_mode, rotation.shape[-1], rotation.dim(),
            scale_alg, dst_type_max, alpha is None)


# The compiled provider compiles _reference (uint8 scale codes) and reinterprets outside the
# compiled graph: Inductor's C++ backend has no float8_e8m0fnu.
_compiled_raw = compiled.CompiledProvider(_reference, _compile_key)
rotate_quant_op.add_provider(compiled.CompiledProvider.name,
                             lambda *args, **kwargs: _as_e8m0(_compiled_raw.run(*args, **kwargs)),
                             _compiled_raw.supports)


TORCH_NPU_FUNCTIONS = {"npu_rotate_quant": npu_rotate_quant}
