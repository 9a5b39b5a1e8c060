"""Op database entries of the activation family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_F64 = torch.float64


def _name(*parts) -> str:
    return "_".join(str(p).replace("torch.", "") for p in parts)


# -- npu_swiglu / npu_swiglu_backward ---------------------------------------------------------

def _swiglu() -> None:
    e = _entry("npu_swiglu")
    for dtype in _DTYPES:
        e.samples.append(Sample(_name("last_dim", dtype), lambda dtype=dtype:
                                ((_g(3, 5, 8, dtype=dtype),), {})))
    e.samples.append(Sample("dim0_positional", lambda: ((_g(6, 3), 0), {})))
    e.samples.append(Sample("dim1_kw", lambda: ((_g(2, 4, 3),), {"dim": 1})))
    e.samples.append(Sample("one_d", lambda: ((_g(10),), {})))
    e.samples.append(Sample("empty_rows", lambda: ((_g(0, 8),), {})))
    e.samples.append(Sample("grad_fp64_dim1", lambda: ((_g(3, 4, 5, dtype=_F64), 1), {}),
                            differentiable=True))
    e.samples.append(Sample("grad_fp64_last", lambda: ((_g(2, 6, dtype=_F64),), {}),
                            differentiable=True))
    e.errors += [
        ErrorSample("odd_dim", lambda: ((_g(3, 7),), {}), ValueError,
                    "npu_swiglu: expected self an even size"),
        ErrorSample("dim_range", lambda: ((_g(3, 8), 2), {}), IndexError,
                    "npu_swiglu: expected dim in the range"),
        ErrorSample("int_input", lambda: ((torch.ones(2, 4, dtype=torch.int32),), {}), TypeError,
                    "npu_swiglu: expected self dtype in"),
        ErrorSample("zero_dim", lambda: ((torch.tensor(1.0),), {}), ValueError,
                    "npu_swiglu: expected self a tensor with 1 to 8 dims"),
        ErrorSample("nine_dims", lambda: ((_g(*([1] * 8 + [2])),), {}), ValueError,
                    "npu_swiglu: expected self a tensor with 1 to 8 dims"),
    ]
    b = _entry("npu_swiglu_backward")
    for dtype in _DTYPES:
        b.samples.append(Sample(_name("last_dim", dtype), lambda dtype=dtype: (
            (_g(3, 4, dtype=dtype), _g(3, 8, dtype=dtype)), {})))
    b.samples.append(Sample("dim0", lambda: ((_g(3, 5), _g(6, 5), 0), {})))
    b.errors += [
        ErrorSample("grad_shape", lambda: ((_g(3, 8), _g(3, 8)), {}), RuntimeError,
                    "npu_swiglu_backward: expected grad_output the shape of self"),
        ErrorSample("grad_dtype", lambda: ((_g(3, 4, dtype=torch.float16), _g(3, 8)), {}),
                    TypeError, "npu_swiglu_backward: expected grad_output the same dtype"),
    ]


# -- npu_geglu / npu_geglu_grad ----------------------------------------------------------------

def _geglu() -> None:
    e = _entry("npu_geglu")
    for dtype in _DTYPES:
        for approximate in (0, 1):
            for left in (False, True):
                e.samples.append(Sample(_name(dtype, "approx", approximate, "left", left),
                                        lambda dtype=dtype, a=approximate, left=left:
                                        ((_g(3, 8, dtype=dtype), -1, a, left), {})))
    e.samples.append(Sample("dim0_kw", lambda: ((_g(4, 3),), {"dim": 0, "approximate": 0})))
    e.samples.append(Sample("grad_fp64_tanh_right", lambda: ((_g(3, 6, dtype=_F64),), {}),
                            differentiable=True))
    e.samples.append(Sample("grad_fp64_erf_left_dim0", lambda: (
        (_g(4, 3, dtype=_F64), 0, 0, True), {}), differentiable=True))
    e.errors += [
        ErrorSample("approximate", lambda: ((_g(3, 8), -1, 2), {}), ValueError,
                    "npu_geglu: expected approximate 0"),
        ErrorSample("odd_dim", lambda: ((_g(3, 5),), {}), ValueError,
                    "npu_geglu: expected self an even size"),
        ErrorSample("dim_range", lambda: ((_g(3, 8), -3), {}), IndexError,
                    "npu_geglu: expected dim in the range"),
        ErrorSample("scalar", lambda: ((torch.tensor(2.0),), {}), ValueError,
                    "npu_geglu: expected self a tensor with 1 to 8 dims"),
    ]
    g = _entry("npu_geglu_grad")
    for dtype in _DTYPES:
        for approximate in (0, 1):
            g.samples.append(Sample(_name(dtype, "approx", approximate), lambda dtype=dtype,
                                    a=approximate: ((_g(3, 4, dtype=dtype), _g(3, 8, dtype=dtype),
                                                     _g(3, 4, dtype=dtype), -1, a), {})))
    g.samples.append(Sample("left_dim0", lambda: ((_g(2, 3), _g(4, 3), _g(2, 3)),
                                                  {"dim": 0, "activate_left": True})))
    g.errors += [
        ErrorSample("gelu_shape", lambda: ((_g(3, 4), _g(3, 8), _g(3, 8)), {}), RuntimeError,
                    "npu_geglu_grad: expected gelu the shape of self"),
        ErrorSample("gelu_dtype", lambda: ((_g(3, 4), _g(3, 8), _g(3, 4, dtype=torch.float16)),
                                           {}), TypeError,
                    "npu_geglu_grad: expected gelu the same dtype"),
    ]


# -- npu_gelu_mul ---------------------------------------------------------------------------------

def _gelu_mul() -> None:
    e = _entry("npu_gelu_mul")
    for dtype in _DTYPES:
        for mode in ("none", "tanh"):
            e.samples.append(Sample(_name(dtype, mode), lambda dtype=dtype, mode=mode:
                                    ((_g(3, 2, 8, dtype=dtype),), {"approximate": mode})))
    e.samples.append(Sample("default_mode", lambda: ((_g(5, 6),), {})))
    e.samples.append(Sample("empty", lambda: ((_g(0, 6),), {})))
    e.errors += [
        ErrorSample("mode", lambda: ((_g(3, 8),), {"approximate": "erf"}), ValueError,
                    "npu_gelu_mul: expected approximate one of"),
        ErrorSample("one_d", lambda: ((_g(8),), {}), ValueError,
                    "npu_gelu_mul: expected input a tensor with 2 to 8 dims"),
        ErrorSample("odd_last", lambda: ((_g(2, 7),), {}), ValueError,
                    "npu_gelu_mul: expected input an even last dim"),
        ErrorSample("last_too_big", lambda: ((_g(1, 1026),), {}), ValueError,
                    "npu_gelu_mul: expected input a last dim <= 1024"),
        ErrorSample("rows_too_many", lambda: ((torch.zeros(200001, 2),), {}),
                    ValueError, "npu_gelu_mul: expected input a product of the dims"),
    ]


# -- fast gelu ----------------------------------------------------------------------------------

def _fast_gelu() -> None:
    for name in ("npu_fast_gelu", "fast_gelu"):
        e = _entry(name)
        for dtype in _DTYPES:
            e.samples.append(Sample(_name(dtype), lambda dtype=dtype:
                                    ((_g(4, 5, dtype=dtype) * 4,), {})))
        e.samples.append(Sample("scalar", lambda: ((torch.tensor(-0.7),), {})))
        e.samples.append(Sample("noncontiguous", lambda: ((_g(6, 4).t(),), {})))
        e.samples.append(Sample("grad_fp64", lambda: ((_g(3, 4, dtype=_F64) * 3,), {}),
                                differentiable=True))
        e.errors += [
            ErrorSample("int", lambda: ((torch.ones(3, dtype=torch.int64),), {}), TypeError,
                        f"{name}: expected self dtype in"),
            ErrorSample("nine_dims", lambda: ((_g(*([1] * 9)),), {}), ValueError,
                        f"{name}: expected self a tensor with at most 8 dims"),
        ]
    b = _entry("npu_fast_gelu_backward")
    for dtype in _DTYPES:
        b.samples.append(Sample(_name(dtype), lambda dtype=dtype:
                                ((_g(4, 5, dtype=dtype), _g(4, 5, dtype=dtype) * 4), {})))
    b.errors += [
        ErrorSample("shape", lambda: ((_g(4, 4), _g(4, 5)), {}), RuntimeError,
                    "npu_fast_gelu_backward: expected grad the shape of self"),
        ErrorSample("dtype", lambda: ((_g(4, 5, dtype=torch.float16), _g(4, 5)), {}),
                    TypeError, "npu_fast_gelu_backward: expected grad the same dtype"),
    ]


# -- silu / mish -------------------------------------------------------------------------------

def _silu_mish() -> None:
    for name in ("npu_silu", "npu_mish"):
        e = _entry(name)
        for dtype in (torch.float32, torch.float16):
            e.samples.append(Sample(_name(dtype), lambda dtype=dtype:
                                    ((_g(3, 7, dtype=dtype) * 4,), {})))
        e.samples.append(Sample("noncontiguous", lambda: ((_g(5, 4)[:, ::2],), {})))
        e.samples.append(Sample("grad_fp64", lambda: ((_g(3, 4, dtype=_F64) * 3,), {}),
                                differentiable=True))
        e.errors.append(ErrorSample("bf16", lambda: ((_g(3, dtype=torch.bfloat16),), {}),
                                    TypeError, f"{name}: expected self dtype in"))
    s = _entry("npu_silu_")
    for dtype in (torch.float32, torch.float16):
        s.samples.append(Sample(_name(dtype), lambda dtype=dtype:
                                ((_g(3, 7, dtype=dtype) * 4,), {})))
    s.errors.append(ErrorSample("int", lambda: ((torch.ones(3, dtype=torch.int32),), {}),
                                TypeError, "npu_silu_: expected self dtype in"))
    b = _entry("npu_silu_backward")
    for dtype in (torch.float32, torch.float16):
        b.samples.append(Sample(_name(dtype), lambda dtype=dtype: (
            (_g(3, 4, dtype=dtype), _g(3, 4, dtype=dtype), _g(3, 4, dtype=dtype)), {})))
    b.errors += [
        ErrorSample("x1_shape", lambda: ((_g(3, 4), _g(3, 4), _g(4, 3)), {}), RuntimeError,
                    "npu_silu_backward: expected x1 the shape of grad_output"),
        ErrorSample("x0_dtype", lambda: ((_g(3, 4), _g(3, 4, dtype=torch.float16), _g(3, 4)),
                                         {}), TypeError,
                    "npu_silu_backward: expected x0 the same dtype"),
    ]
    m = _entry("npu_mish_backward")
    for dtype in (torch.float32, torch.float16):
        m.samples.append(Sample(_name(dtype), lambda dtype=dtype: (
            (_g(3, 4, dtype=dtype), _g(3, 4, dtype=dtype) * 3), {})))
    m.errors += [
        ErrorSample("shape", lambda: ((_g(3, 5), _g(3, 4)), {}), RuntimeError,
                    "npu_mish_backward: expected grad the shape of input"),
        ErrorSample("bf16", lambda: ((_g(3, 4, dtype=torch.bfloat16),
                                      _g(3, 4, dtype=torch.bfloat16)), {}), TypeError,
                    "npu_mish_backward: expected grad dtype in"),
    ]


# -- npu_clipped_swiglu --------------------------------------------------------------------------

def _clipped_swiglu() -> None:
    e = _entry("npu_clipped_swiglu")
    for dtype in _DTYPES:
        for interleaved in (True, False):
            e.samples.append(Sample(_name(dtype, "interleaved", interleaved),
                                    lambda dtype=dtype, il=interleaved:
                                    ((_g(6, 8, dtype=dtype) * 5,), {"interleaved": il})))
    e.samples.append(Sample("group_index", lambda: (
        (_g(7, 8) * 5,), {"group_index": torch.tensor([2, 3], dtype=torch.int64)})))
    e.samples.append(Sample("group_index_over", lambda: (
        (_g(3, 2, 4),), {"group_index": torch.tensor([9], dtype=torch.int64), "dim": 1,
                         "alpha": 0.7, "limit": 1.0, "bias": 1.2, "interleaved": False})))
    e.samples.append(Sample("dim0_interleaved", lambda: ((_g(4, 3, 2),), {"dim": 0})))
    e.errors += [
        ErrorSample("odd", lambda: ((_g(3, 5),), {}), ValueError,
                    "npu_clipped_swiglu: expected x an even size"),
        ErrorSample("group_dtype", lambda: ((_g(3, 4),), {"group_index": torch.tensor(
            [1], dtype=torch.int32)}), TypeError,
                    "npu_clipped_swiglu: expected group_index dtype in"),
        ErrorSample("group_dims", lambda: ((_g(3, 4),), {"group_index": torch.tensor(
            [[1]], dtype=torch.int64)}), ValueError,
                    "npu_clipped_swiglu: expected group_index a 1-D tensor"),
        ErrorSample("dim_range", lambda: ((_g(3, 4),), {"dim": 2}), IndexError,
                    "npu_clipped_swiglu: expected dim in the range"),
    ]


_swiglu()
_geglu()
_gelu_mul()
_fast_gelu()
_silu_mish()
_clipped_swiglu()
