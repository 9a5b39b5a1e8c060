"""torch_npu.npu_dtype_cast, npu_dtype_cast_ and npu_dtype_cast_backward.

Formula (seed 004; op-plugin ``op_plugin/ops/opapi/CastKernelNpuOpApi.cpp`` followed for the
torch_npu-only dtypes, ``op_plugin/ops/aclops/CastKernelNpu.cpp`` for the plain ones)::

    v = values of self read as input_dtype     (None: self's own dtype)
    y = v converted to dtype

Plain torch dtypes convert as ``Tensor.to`` does (float -> int truncates toward zero; a cast to
the same dtype returns a copy).  The dtypes PyTorch lacks travel as torch_npu's integer codes
(``torch_npu.hifloat8`` = 290, ``float4_e2m1fn_x2`` = 296, ``float4_e1m2fn_x2`` = 297,
``int4`` = 285; ``float8_e5m2`` / ``float8_e4m3fn`` also as 291 / 292) and are stored in uint8:

* hifloat8: one code per byte, same shape (bit-exact encoder of :mod:`..quant.hifloat8`,
  CAST_ROUND, saturating to +-32768 with NaN -> 0, as the Ascend quantizing kernels do).
* float4_e2m1 / float4_e1m2 / int4: two values per byte along the last dim (element ``2i`` in
  the low nibble), so the last dim halves and must be even; as input_dtype, the last dim
  doubles.  float4 rounds half to even and saturates; int4 keeps the low four bits of each
  integer (op-plugin test_dtype_cast.py: int32 [1, 2, 3, 4] -> uint8 [33, 67]).
* float8: torch's float8 dtypes; the cast rounds half to even and saturates (NaN -> 0).

Autograd (op-plugin derivatives.yaml)::

    d self = npu_dtype_cast_backward(grad, self.dtype, dtype, input_dtype)
           = npu_dtype_cast(grad, input_dtype or self.dtype, grad_dtype=dtype)
"""

from __future__ import annotations

import torch

from ... import checks, dtypes
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace
from ..quant import core as qcore
from ..quant import hifloat8, mx

OP = "npu_dtype_cast"
SCHEMA = "npu_dtype_cast(Tensor self, int dtype, int? input_dtype=None) -> Tensor"
BACKWARD_OP = "npu_dtype_cast_backward"
BACKWARD_SCHEMA = ("npu_dtype_cast_backward(Tensor grad, ScalarType dtype, int? grad_dtype=None, "
                   "int? input_dtype=None) -> Tensor")
INPLACE_OP = "npu_dtype_cast_"
INPLACE_PUBLIC_SCHEMA = "npu_dtype_cast_(Tensor(a!) self, Tensor src) -> Tensor(a!)"
INPLACE_SCHEMA = "_npu_dtype_cast_inplace(Tensor(a!) self, Tensor src) -> ()"

_FP4 = {dtypes.FLOAT4_E2M1FN_X2: mx.FLOAT4_FORMATS["float4_e2m1"],
        dtypes.FLOAT4_E1M2FN_X2: mx.FLOAT4_FORMATS["float4_e1m2"]}
_INT4 = (dtypes.INT4, 16)          # torch_npu.int4 and torch.quint4x2
_NIBBLE = tuple(_FP4) + _INT4      # two per byte
_BYTE_CODES = (dtypes.HIFLOAT8,) + _NIBBLE
_FLOAT8 = {dtypes.FLOAT8_E5M2: torch.float8_e5m2, dtypes.FLOAT8_E4M3FN: torch.float8_e4m3fn,
           23: torch.float8_e5m2, 24: torch.float8_e4m3fn}
_PLAIN = {code: dt for code, dt in dtypes.SCALAR_TYPE_CODES.items()
          if dt not in (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2)}
_PLAIN.update(_FLOAT8)
_KNOWN = "a torch dtype or one of torch_npu.hifloat8 / int4 / float4_e2m1fn_x2 / float4_e1m2fn_x2"


def _code(value) -> int:
    return value if isinstance(value, int) else qcore.dtype_code(value)


def _check_code(op: str, param: str, code) -> None:
    checks.expect(isinstance(code, int) and not isinstance(code, bool)
                  and (code in _PLAIN or code in _BYTE_CODES), op, param, _KNOWN,
                  lambda: qcore.describe_code(code), ValueError)


def _check_cast(op: str, self, dtype, input_dtype) -> None:
    _check_code(op, "dtype", dtype)
    if input_dtype is not None:
        _check_code(op, "input_dtype", input_dtype)
    src = input_dtype
    if src is not None and src in _BYTE_CODES:
        checks.expect(self.dtype in (torch.uint8, torch.int8), op, "self",
                      lambda: f"uint8 storage when input_dtype is {qcore.describe_code(src)}",
                      lambda: f"dtype {dtypes.name(self.dtype)}", TypeError)
        checks.expect(src not in _INT4, op, "input_dtype",
                      "not int4 (reading packed int4 back is not implemented by npu_anywhere)",
                      qcore.describe_code(src), NotImplementedError)
        checks.expect(self.dim() >= 1 or src == dtypes.HIFLOAT8, op, "self",
                      "at least 1-D for packed float4 input", "a 0-D tensor", ValueError)
    elif src is not None:
        want = _PLAIN[src]
        checks.expect(want.itemsize == self.dtype.itemsize, op, "input_dtype",
                      lambda: f"a dtype of self's element size ({self.dtype.itemsize} bytes) "
                      "to read self's bytes as",
                      lambda: f"{dtypes.name(want)} ({want.itemsize} bytes)", ValueError)
    source_float = (src == dtypes.HIFLOAT8 or src in _FP4 or
                    (src is None and self.dtype.is_floating_point) or
                    (src in _PLAIN and _PLAIN[src].is_floating_point))
    if dtype in _NIBBLE:
        in_last = self.shape[-1] * (2 if src in _FP4 else 1) if self.dim() else 1
        checks.expect(self.dim() >= 1 and in_last % 2 == 0, op, "self",
                      lambda: f"an even last dim for output {qcore.describe_code(dtype)} "
                      "(two values per byte)", lambda: f"shape {tuple(self.shape)}", ValueError)
    if dtype in _INT4:
        checks.expect(not source_float, op, "self", "integer values for output int4 (casting "
                      "floats to int4 is not implemented by npu_anywhere)",
                      lambda: f"dtype {dtypes.name(self.dtype)}", NotImplementedError)


def check_dtype_cast(self, dtype, input_dtype=None):
    _check_cast(OP, self, _code(dtype), None if input_dtype is None else _code(input_dtype))


def _values(self: torch.Tensor, src) -> torch.Tensor:
    """self's values read as dtype code ``src`` (None: as they are)."""
    if src is None or (src in _PLAIN and _PLAIN[src] == self.dtype):
        return self
    if src == dtypes.HIFLOAT8:
        return hifloat8.decode_hifloat8(self)
    if src in _FP4:
        codes = mx.unpack_fp4(self.to(torch.uint8) if self.dtype != torch.uint8 else self)
        if src == dtypes.FLOAT4_E2M1FN_X2:
            return mx.decode_e2m1(codes)
        return mx.decode_e1m2(codes)
    return self.contiguous().view(_PLAIN[src])


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    pairs = (codes.to(torch.int32) & 0xF).reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def _convert(v: torch.Tensor, dst: int) -> torch.Tensor:
    if dst == dtypes.HIFLOAT8:
        return qcore.cast_to(v.to(torch.float32), qcore.FORMATS["hifloat8"])
    if dst in _FP4:
        fmt = _FP4[dst]
        return _pack_nibbles(mx.encode_fp4(mx.round_to_format(v.to(torch.float32), fmt, "rint"),
                                           fmt))
    if dst in _INT4:
        return _pack_nibbles(v)
    target = _PLAIN[dst]
    if target in (torch.float8_e5m2, torch.float8_e4m3fn):
        fmt = qcore.FORMATS[str(target).replace("torch.", "")]
        return qcore.cast_to(v.to(torch.float32), fmt)
    if v.dtype == target:
        return v.clone(memory_format=torch.contiguous_format)
    return v.to(target)


def dtype_cast_reference(self, dtype, input_dtype=None):
    dst = _code(dtype)
    src = None if input_dtype is None else _code(input_dtype)
    return _convert(_values(self, src), dst).contiguous()


def _out_meta(self, dst: int, src):
    shape = list(self.shape)
    if src in _FP4:
        shape[-1] *= 2
    if dst in _NIBBLE:
        shape[-1] //= 2
    return shape, torch.uint8 if dst in _BYTE_CODES else _PLAIN[dst]


def _dtype_cast_fake(self, dtype, input_dtype=None):
    shape, out_dtype = _out_meta(self, _code(dtype), None if input_dtype is None
                                 else _code(input_dtype))
    return self.new_empty(shape, dtype=out_dtype)


dtype_cast_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dtype_cast,
                      reference=dtype_cast_reference, fake=_dtype_cast_fake,
                      metadata_check=True, info=OpInfo(api="torch_npu"))


def check_dtype_cast_backward(grad, dtype, grad_dtype=None, input_dtype=None):
    target = _code(input_dtype) if input_dtype is not None else _code(dtype)
    _check_cast(BACKWARD_OP, grad, target, None if grad_dtype is None else _code(grad_dtype))


def dtype_cast_backward_reference(grad, dtype, grad_dtype=None, input_dtype=None):
    target = input_dtype if input_dtype is not None else _code(dtype)
    return dtype_cast_reference(grad, target, grad_dtype)


def _dtype_cast_backward_fake(grad, dtype, grad_dtype=None, input_dtype=None):
    target = input_dtype if input_dtype is not None else _code(dtype)
    return _dtype_cast_fake(grad, target, grad_dtype)


dtype_cast_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_dtype_cast_backward,
                               reference=dtype_cast_backward_reference,
                               fake=_dtype_cast_backward_fake, metadata_check=True,
                               info=OpInfo(api="torch_npu", backward_of=OP))
dtype_cast_backward_op.forbid_autograd("op-plugin's derivatives.yaml lists no double backward")


def _setup_context(ctx, inputs, output):
    self, dtype, input_dtype = inputs
    ctx.self_dtype = self.dtype
    ctx.dtype = dtype
    ctx.input_dtype = input_dtype


def _backward(ctx, grad):
    return (dtype_cast_backward_op(grad, ctx.self_dtype, _code(ctx.dtype), ctx.input_dtype),
            None, None)


dtype_cast_op.set_autograd(setup_context=_setup_context, backward=_backward)


def check_dtype_cast_(self, src):
    checks.expect(tuple(src.shape) == tuple(self.shape), INPLACE_OP, "src",
                  lambda: f"self's shape {tuple(self.shape)}", lambda: f"shape {tuple(src.shape)}",
                  RuntimeError)
    checks.expect_same_device({"self": self, "src": src}, INPLACE_OP)


def dtype_cast_inplace_reference(self, src):
    # CastKernelNpu.cpp: a src of self's dtype leaves self as it is (nothing is copied).
    if self.dtype != src.dtype:
        self.copy_(src.to(self.dtype))


_dtype_cast_inplace_internal, dtype_cast_inplace_op = define_inplace(
    INPLACE_PUBLIC_SCHEMA, INPLACE_SCHEMA, check=check_dtype_cast_,
    reference=dtype_cast_inplace_reference,
    no_grad="op-plugin's derivatives.yaml lists no backward for npu_dtype_cast_")


def npu_dtype_cast(self, dtype, input_dtype=None):
    """Convert ``self`` to ``dtype``; ``input_dtype`` says how to read ``self``'s storage.

    Formula::

        y = (self read as input_dtype).to(dtype)

    Parameters
    ----------
    self : Tensor
        Any shape.  With ``input_dtype`` hifloat8 / float4 it holds those codes in uint8.
    dtype : torch.dtype or int
        A torch dtype (float8 included) or torch_npu's codes ``torch_npu.hifloat8`` (290),
        ``torch_npu.float4_e2m1fn_x2`` (296), ``torch_npu.float4_e1m2fn_x2`` (297),
        ``torch_npu.int4`` (285; ``torch.quint4x2`` too).
    input_dtype : torch.dtype or int, optional
        How to read ``self``: None (its own dtype), a torch dtype of the same element size (the
        bytes are reinterpreted), hifloat8 or float4 codes (uint8 storage).

    Returns
    -------
    Tensor
        ``self``'s shape (last dim halved for float4 / int4 outputs, doubled for float4
        inputs), in ``dtype``; the torch_npu-only dtypes come back as uint8 codes.  Always a
        new, contiguous tensor (also when ``dtype`` is ``self``'s).

    Constraints
    -----------
    float4 / int4 outputs need an even last dim.  Output int4 takes integer values only
    (npu_anywhere does not implement float -> int4, nor int4 input).

    Notes
    -----
    hifloat8 and float8 outputs round to nearest (hifloat8: half away from zero, CAST_ROUND;
    float8 and float4: half to even) and saturate (NaN -> 0), the behaviour of the Ascend
    quantizing kernels; op-plugin's CastKernelNpuOpApi.cpp does not say which saturation mode
    aclnnCast uses.  Differentiable (derivatives.yaml): the gradient is cast back to
    ``self``'s dtype by :func:`npu_dtype_cast_backward`.

    Examples
    --------
    >>> npu_anywhere.npu_dtype_cast(torch.tensor([0, 0.5, -1.]), dtype=torch.int)
    tensor([ 0,  0, -1], dtype=torch.int32)
    """
    return dtype_cast_op(self, dtype, input_dtype)


def npu_dtype_cast_backward(grad, dtype, grad_dtype=None, input_dtype=None):
    """Gradient of :func:`npu_dtype_cast`: ``grad`` (read as ``grad_dtype``) cast to
    ``input_dtype`` when given, else to ``dtype`` (the forward input's dtype).

    Follows op-plugin ``op_plugin/ops/opapi/CastKernelNpuOpApi.cpp``
    (``npu_dtype_cast(grad, input_dtype or dtype, grad_dtype)``).  Returns a new tensor.
    """
    return dtype_cast_backward_op(grad, dtype, grad_dtype, input_dtype)


def npu_dtype_cast_(self, src):
    """Write ``src`` converted to ``self.dtype`` into ``self``; returns ``self``.

    ``src`` must have ``self``'s shape.  As op-plugin's CastKernelNpu.cpp does, a ``src`` of
    ``self``'s own dtype leaves ``self`` unchanged (nothing is copied).  No backward.
    """
    return dtype_cast_inplace_op(self, src)


TORCH_NPU_FUNCTIONS = {
    OP: npu_dtype_cast,
    BACKWARD_OP: npu_dtype_cast_backward,
    INPLACE_OP: npu_dtype_cast_,
}
