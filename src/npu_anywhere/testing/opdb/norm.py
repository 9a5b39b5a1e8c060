"""Op database entries of the normalization family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32, _F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
_DTYPES = (_F32, _F16, _BF16)


def _n(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _rms_norm() -> None:
    e = _entry("npu_rms_norm")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"k1_{_n(dtype)}", lambda dtype=dtype: (
            (_g(3, 5, 16, dtype=dtype), _g(16, dtype=dtype), 1e-5), {})))
    e.samples += [
        Sample("k2_gamma_2d", lambda: ((_g(2, 3, 4, 8), _g(4, 8)), {})),
        Sample("k_all_dims", lambda: ((_g(3, 7), _g(3, 7)), {"epsilon": 1e-3})),
        Sample("one_dim", lambda: ((_g(9), _g(9)), {})),
        Sample("mixed_fp16_fp32", lambda: ((_g(4, 16, dtype=_F16), _g(16)), {})),
        Sample("mixed_bf16_fp32", lambda: ((_g(4, 16, dtype=_BF16), _g(16)), {})),
        Sample("empty_rows", lambda: ((_g(0, 16), _g(16)), {})),
        Sample("grad_fp64", lambda: ((_g(3, 4, 6, dtype=_F64), _g(4, 6, dtype=_F64)), {}),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("gamma_shape", lambda: ((_g(4, 16), _g(8)), {}), RuntimeError,
                    "npu_rms_norm: expected gamma the trailing dims"),
        ErrorSample("gamma_too_many_dims", lambda: ((_g(16), _g(1, 16)), {}), ValueError,
                    "npu_rms_norm: expected gamma a 1-D to 1-D"),
        ErrorSample("fp32_x_fp16_gamma", lambda: ((_g(4, 16), _g(16, dtype=_F16)), {}),
                    TypeError, "npu_rms_norm: expected gamma dtype in"),
        ErrorSample("int_x", lambda: ((torch.ones(4, 16, dtype=torch.int32), _g(16)), {}),
                    TypeError, "npu_rms_norm: expected self dtype in"),
        ErrorSample("empty_gamma", lambda: ((_g(4, 0), _g(0)), {}), ValueError,
                    "npu_rms_norm: expected gamma a non-empty"),
    ]

    b = _entry("npu_rms_norm_backward")
    b.samples += [
        Sample("fp32", lambda: ((_g(3, 16), _g(3, 16), _g(16), torch.rand(3, 1) + 0.5), {})),
        Sample("bf16_fp32_gamma", lambda: ((_g(2, 3, 16, dtype=_BF16), _g(2, 3, 16, dtype=_BF16),
                                            _g(16), torch.rand(2, 3, 1) + 0.5), {})),
        Sample("k2_rstd_leading_shape", lambda: ((_g(2, 3, 8), _g(2, 3, 8), _g(3, 8),
                                                  torch.rand(2) + 0.5), {})),
        Sample("gamma_all_dims", lambda: ((_g(3, 8), _g(3, 8), _g(3, 8),
                                           torch.rand(1, 1) + 0.5), {})),
    ]
    b.errors += [
        ErrorSample("rstd_shape", lambda: ((_g(3, 16), _g(3, 16), _g(16), torch.rand(4, 1)), {}),
                    RuntimeError, "npu_rms_norm_backward: expected rstd shape"),
        ErrorSample("rstd_fp16", lambda: ((_g(3, 16), _g(3, 16), _g(16),
                                           torch.rand(3, 1, dtype=_F16)), {}),
                    TypeError, "npu_rms_norm_backward: expected rstd dtype in"),
        ErrorSample("dy_dtype", lambda: ((_g(3, 16, dtype=_F16), _g(3, 16), _g(16),
                                          torch.rand(3, 1)), {}),
                    TypeError, "npu_rms_norm_backward: expected dy the dtype of self"),
    ]


def _gemma() -> None:
    e = _entry("npu_gemma_rms_norm")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"k1_{_n(dtype)}", lambda dtype=dtype: (
            (_g(4, 3, 16, dtype=dtype), _g(16, dtype=dtype)), {})))
    e.samples.append(Sample("k2_eps", lambda: ((_g(2, 4, 8), _g(4, 8), 1e-4), {})))
    e.errors += [
        ErrorSample("mixed_dtype", lambda: ((_g(4, 16, dtype=_F16), _g(16)), {}), TypeError,
                    "npu_gemma_rms_norm: expected gamma dtype in"),
        ErrorSample("gamma_shape", lambda: ((_g(4, 16), _g(4)), {}), RuntimeError,
                    "npu_gemma_rms_norm: expected gamma the trailing dims of input"),
    ]


def _add_rms_norm() -> None:
    e = _entry("npu_add_rms_norm")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"k1_{_n(dtype)}", lambda dtype=dtype: (
            (_g(3, 5, 16, dtype=dtype), _g(3, 5, 16, dtype=dtype), _g(16, dtype=dtype)), {})))
    e.samples += [
        Sample("k2_fp16_eps", lambda: ((_g(2, 4, 8, dtype=_F16), _g(2, 4, 8, dtype=_F16),
                                        _g(4, 8, dtype=_F16)), {"epsilon": 1e-5})),
        Sample("fp64", lambda: ((_g(3, 8, dtype=_F64), _g(3, 8, dtype=_F64),
                                 _g(8, dtype=_F64)), {})),
    ]
    e.errors += [
        ErrorSample("x2_shape", lambda: ((_g(4, 16), _g(3, 16), _g(16)), {}), RuntimeError,
                    "npu_add_rms_norm: expected x2 the shape of x1"),
        ErrorSample("gamma_dtype", lambda: ((_g(4, 16, dtype=_F16), _g(4, 16, dtype=_F16),
                                             _g(16)), {}), TypeError,
                    "npu_add_rms_norm: expected gamma the same dtype as x1"),
        ErrorSample("gamma_shape", lambda: ((_g(4, 16), _g(4, 16), _g(8)), {}), RuntimeError,
                    "npu_add_rms_norm: expected gamma the trailing dims of x1"),
    ]

    c = _entry("npu_add_rms_norm_cast")
    for dtype in (_F16, _BF16):
        c.samples.append(Sample(f"k1_{_n(dtype)}", lambda dtype=dtype: (
            (_g(4, 3, 16, dtype=dtype), _g(4, 3, 16, dtype=dtype), _g(16, dtype=dtype)), {})))
    c.samples.append(Sample("k2_bf16", lambda: ((_g(2, 4, 8, dtype=_BF16),
                                                 _g(2, 4, 8, dtype=_BF16),
                                                 _g(4, 8, dtype=_BF16), 1e-5), {})))
    # Past 8704 normalized elements the bfloat16 kernel runs its split-D template.
    c.samples.append(Sample("split_d_bf16", lambda: ((_g(2, 8800, dtype=_BF16),
                                                      _g(2, 8800, dtype=_BF16),
                                                      _g(8800, dtype=_BF16)), {})))
    c.errors += [
        ErrorSample("fp32_input", lambda: ((_g(4, 16), _g(4, 16), _g(16)), {}), TypeError,
                    "npu_add_rms_norm_cast: expected x1 dtype in"),
        ErrorSample("x2_dtype", lambda: ((_g(4, 16, dtype=_F16), _g(4, 16, dtype=_BF16),
                                          _g(16, dtype=_F16)), {}), TypeError,
                    "npu_add_rms_norm_cast: expected x2 the same dtype as x1"),
    ]


def _layer_norm_eval() -> None:
    e = _entry("npu_layer_norm_eval")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"affine_{_n(dtype)}", lambda dtype=dtype: (
            (_g(6, 4, 8, dtype=dtype), [8], _g(8, dtype=dtype), _g(8, dtype=dtype), 1e-5), {})))
    e.samples += [
        Sample("no_affine_2dims", lambda: ((_g(3, 4, 5), [4, 5]), {})),
        Sample("weight_only_kw", lambda: ((_g(6, 4), [4]), {"weight": _g(4), "eps": 1e-3})),
        Sample("weight_other_shape", lambda: ((_g(2, 3, 4), [3, 4], _g(12), _g(3, 4)), {})),
    ]
    e.errors += [
        ErrorSample("shape_mismatch", lambda: ((_g(6, 4), [5]), {}), RuntimeError,
                    "npu_layer_norm_eval: expected normalized_shape the trailing dims"),
        ErrorSample("weight_numel", lambda: ((_g(6, 4), [4], _g(5)), {}), RuntimeError,
                    "npu_layer_norm_eval: expected weight 4 elements"),
        ErrorSample("int_input", lambda: ((torch.ones(6, 4, dtype=torch.int64), [4]), {}),
                    TypeError, "npu_layer_norm_eval: expected input dtype in"),
    ]


def _group_norms() -> None:
    e = _entry("npu_group_norm_silu")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"nchw_{_n(dtype)}", lambda dtype=dtype: (
            (_g(2, 8, 3, 3, dtype=dtype), _g(8, dtype=dtype), _g(8, dtype=dtype), 4, 1e-5),
            {})))
    e.samples += [
        Sample("nc_2d", lambda: ((_g(3, 6), _g(6), _g(6), 3), {})),
        Sample("fp16_fp32_affine", lambda: ((_g(2, 4, 5, dtype=_F16), _g(4), _g(4)),
                                            {"group": 2, "eps": 1e-4})),
        Sample("no_affine", lambda: ((_g(2, 4, 5), None, None, 2), {})),
    ]
    e.errors += [
        ErrorSample("group_divides", lambda: ((_g(2, 6, 3), _g(6), _g(6), 4), {}), ValueError,
                    "npu_group_norm_silu: expected input a channel dim"),
        ErrorSample("eps_zero", lambda: ((_g(2, 4, 3), _g(4), _g(4), 2, 0.0), {}), ValueError,
                    "npu_group_norm_silu: expected eps > 0"),
        ErrorSample("weight_len", lambda: ((_g(2, 4, 3), _g(5), _g(4), 2), {}), RuntimeError,
                    "npu_group_norm_silu: expected weight a 1-D tensor of C"),
        ErrorSample("one_dim", lambda: ((_g(4), _g(4), _g(4), 2), {}), ValueError,
                    "npu_group_norm_silu: expected input a 2-D to 8-D"),
    ]

    s = _entry("npu_group_norm_swish")
    for dtype in _DTYPES:
        s.samples.append(Sample(f"nchw_{_n(dtype)}", lambda dtype=dtype: (
            (_g(2, 8, 3, 3, dtype=dtype), 4, _g(8, dtype=dtype), _g(8, dtype=dtype)),
            {"eps": 1e-5, "swish_scale": 1.5})))
    s.samples += [
        Sample("defaults_3d", lambda: ((_g(3, 4, 6), 4, _g(4), _g(4)), {})),
        Sample("none_eps_scale", lambda: ((_g(3, 4, 6), 2, _g(4), _g(4), None, None), {})),
        Sample("grad_fp64", lambda: ((_g(2, 6, 5, dtype=_F64), 3, _g(6, dtype=_F64),
                                      _g(6, dtype=_F64), 1e-5, 0.8), {}), differentiable=True),
    ]
    s.errors += [
        ErrorSample("empty", lambda: ((_g(0, 4, 3), 2, _g(4), _g(4)), {}), ValueError,
                    "npu_group_norm_swish: expected input a non-empty"),
        ErrorSample("groups_zero", lambda: ((_g(2, 4, 3), 0, _g(4), _g(4)), {}), ValueError,
                    "npu_group_norm_swish: expected num_groups > 0"),
        ErrorSample("bias_dtype", lambda: ((_g(2, 4, 3, dtype=_F16), 2, _g(4, dtype=_F16),
                                            _g(4)), {}), TypeError,
                    "npu_group_norm_swish: expected bias the same dtype as weight"),
    ]

    gr = _entry("npu_group_norm_swish_grad")

    def grad_args(dtype=_F32, mask=(True, True, True)):
        x = _g(2, 8, 5, dtype=dtype)
        return ((_g(2, 8, 5, dtype=dtype), x, 4, _g(8, dtype=dtype), _g(8, dtype=dtype),
                 _g(2, 4, dtype=dtype), torch.rand(2, 4, dtype=dtype) + 0.5, list(mask)),
                {"swish_scale": 1.2})

    gr.samples += [
        Sample("fp32", lambda: grad_args()),
        Sample("bf16", lambda: grad_args(_BF16)),
        Sample("mask_x_only", lambda: grad_args(mask=(True, False, False))),
    ]
    gr.errors += [
        ErrorSample("mean_shape", lambda: ((_g(2, 8, 5), _g(2, 8, 5), 4, _g(8), _g(8),
                                            _g(2, 2), _g(2, 4), [True, True, True]), {}),
                    RuntimeError, "npu_group_norm_swish_grad: expected mean shape"),
        ErrorSample("mask_len", lambda: ((_g(2, 8, 5), _g(2, 8, 5), 4, _g(8), _g(8),
                                          _g(2, 4), _g(2, 4), [True, True]), {}),
                    ValueError, "npu_group_norm_swish_grad: expected grad_input_mask"),
        ErrorSample("grad_dtype", lambda: ((_g(2, 8, 5, dtype=_F16), _g(2, 8, 5), 4, _g(8),
                                            _g(8), _g(2, 4), _g(2, 4), [True, True, True]), {}),
                    TypeError, "npu_group_norm_swish_grad: expected grad the dtype of input"),
    ]


def _normalize_batch() -> None:
    e = _entry("npu_normalize_batch")

    def args(n=3, c=4, d=7, lengths=(3, 7, 5)):
        return torch.rand(n, c, d) * 9 + 1, torch.tensor(lengths, dtype=torch.int32)

    e.samples += [
        Sample("per_feature", lambda: (args() + (0,), {})),
        Sample("all_features_kw", lambda: (args(), {"normalize_type": 1})),
        Sample("default_type_long_len", lambda: (args(lengths=(9, 2, 7)), {})),
    ]
    e.errors += [
        ErrorSample("bad_type", lambda: (args() + (2,), {}), ValueError,
                    "npu_normalize_batch: expected normalize_type one of"),
        ErrorSample("int64_len", lambda: ((torch.rand(3, 4, 7), torch.tensor([3, 4, 5])), {}),
                    TypeError, "npu_normalize_batch: expected seq_len dtype in"),
        ErrorSample("len_count", lambda: ((torch.rand(3, 4, 7),
                                           torch.tensor([3, 4], dtype=torch.int32)), {}),
                    RuntimeError, "npu_normalize_batch: expected seq_len one length"),
        ErrorSample("fp16", lambda: ((torch.rand(3, 4, 7, dtype=_F16),
                                      torch.tensor([3, 4, 5], dtype=torch.int32)), {}),
                    TypeError, "npu_normalize_batch: expected self dtype in"),
    ]


_rms_norm()
_gemma()
_add_rms_norm()
_layer_norm_eval()
_group_norms()
_normalize_batch()
