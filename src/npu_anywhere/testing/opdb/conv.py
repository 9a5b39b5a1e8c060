"""Op database entries of the convolution ops of the conv_rnn family (plain and transposed
convolutions with their backward ops, the causal 1-D convolutions, deformable convolution)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _rand(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def _conv_args(nd=2, dtype=torch.float32, bias=True, groups=2):
    spatial = (5, 4, 3)[:nd] if nd == 3 else (7, 6)
    x = _rand(2, 4, *spatial, dtype=dtype)
    w = _rand(6, 4 // groups, *([3, 2, 2][:nd] if nd == 3 else [3, 2]), dtype=dtype, seed=1)
    b = _rand(6, dtype=dtype, seed=2) if bias else None
    stride, padding, dilation = [2, 1, 1][:nd], [1, 0, 1][:nd], [1, 2, 1][:nd]
    return x, w, b, stride, padding, dilation, groups


def _transpose_args(nd=2, dtype=torch.float32, bias=True, groups=2):
    spatial = (3, 4, 3)[:nd] if nd == 3 else (4, 5)
    x = _rand(2, 4, *spatial, dtype=dtype)
    w = _rand(4, 3, *([2, 3, 2][:nd] if nd == 3 else [3, 2]), dtype=dtype, seed=1)
    b = _rand(3 * groups, dtype=dtype, seed=2) if bias else None
    padding, output_padding, stride, dilation = [1, 0, 0][:nd], [1, 0, 1][:nd], \
        [2, 1, 2][:nd], [1, 2, 1][:nd]
    return x, w, b, padding, output_padding, stride, dilation, groups


def _plain_conv() -> None:
    for name, nd in (("npu_conv2d", 2), ("npu_conv3d", 3)):
        e = _entry(name)
        e.samples += [
            Sample("bf16_groups_bias", lambda nd=nd: (_conv_args(nd, torch.bfloat16), {})),
        ]
        e.errors += [
            ErrorSample("groups", lambda nd=nd: ((*_conv_args(nd)[:6], 3), {}), RuntimeError,
                        f"{name}: expected input in_channels divisible by groups = 3"),
            ErrorSample("short_stride", lambda nd=nd: (
                (*_conv_args(nd)[:3], [1], *_conv_args(nd)[4:]), {}), ValueError,
                f"{name}: expected stride a list of at least {nd} ints"),
        ]
    e = _entry("npu_convolution")
    e.samples += [
        Sample("conv2d_fp64", lambda: (_conv_args(2, torch.float64), {}), differentiable=True),
    ]
    e.errors += [
        ErrorSample("bias_shape", lambda: ((*_conv_args()[:2], torch.zeros(5),
                                            *_conv_args()[3:]), {}), RuntimeError,
                    "npu_convolution: expected bias the shape \\(out_channels,\\)"),
        ErrorSample("negative_padding", lambda: ((*_conv_args()[:4], [-1, 0],
                                                  *_conv_args()[5:]), {}), ValueError,
                    "npu_convolution: expected padding entries >= 0"),
    ]

    def grad_args(mask=(True, True, True), dtype=torch.float32):
        x, w, _b, stride, padding, dilation, groups = _conv_args(2, dtype)
        grad = _rand(2, 6, 4, 4, dtype=dtype, seed=3)
        return (x, grad, w, stride, padding, dilation, groups, list(mask)), {}

    e = _entry("npu_convolution_backward")
    e.samples += [Sample("bf16_input_bias", lambda: grad_args((True, False, True),
                                                              torch.bfloat16))]
    e3 = _entry("npu_conv2d_backward")
    e3.samples += [Sample("all", grad_args)]
    e3.errors += [ErrorSample("rank", lambda: ((_rand(2, 4, 5, 4, 3), *grad_args()[0][1:]), {}),
                              ValueError, "npu_conv2d_backward: expected input a 4-D tensor")]

    def grad_args_3d():
        x, w, _b, stride, padding, dilation, groups = _conv_args(3)
        return (x, _rand(2, 6, 3, 2, 4, seed=3), w, stride, padding, dilation, groups,
                [True, True, False]), {}

    e3 = _entry("npu_conv3d_backward")
    e3.samples += [Sample("weight_input", grad_args_3d)]
    e3.errors += [ErrorSample("mask_len", lambda: ((*grad_args_3d()[0][:7], [True]), {}),
                              RuntimeError, "npu_conv3d_backward")]
    e.errors += [
        ErrorSample("grad_shape", lambda: ((grad_args()[0][0], _rand(2, 6, 4, 3),
                                            *grad_args()[0][2:]), {}), RuntimeError,
                    "npu_convolution_backward: expected grad_output the forward output shape"),
    ]


_plain_conv()


def _transposed_conv() -> None:
    e = _entry("npu_conv_transpose2d")
    e.samples += [
        Sample("fp16_groups_bias", lambda: (_transpose_args(2, torch.float16), {})),
    ]
    e.errors += [
        ErrorSample("output_padding", lambda: (
            (*_transpose_args()[:4], [2, 2], *_transpose_args()[5:]), {}), ValueError,
            "npu_conv_transpose2d: expected output_padding entries smaller than stride"),
        ErrorSample("weight_in_channels", lambda: (
            (_transpose_args()[0], _rand(3, 3, 3, 2), *_transpose_args()[2:]), {}), RuntimeError,
            "npu_conv_transpose2d: expected weight size\\(0\\) equal to in_channels 4"),
    ]
    e = _entry("npu_convolution_transpose")
    e.samples += [
        Sample("transpose3d_bf16", lambda: (_transpose_args(3, torch.bfloat16), {})),
        Sample("transpose2d_fp64", lambda: (_transpose_args(2, torch.float64), {}),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("rank", lambda: ((_rand(2, 4, 5), *_transpose_args()[1:]), {}), ValueError,
                    "npu_convolution_transpose: expected input a tensor with one of"),
    ]

    def grad_args(mask=(True, True, True), dtype=torch.float32):
        x, w, _b, padding, output_padding, stride, dilation, groups = _transpose_args(2, dtype)
        grad = _rand(2, 6, 8, 7, dtype=dtype, seed=3)
        return (x, grad, w, padding, output_padding, stride, dilation, groups, list(mask)), {}

    e2 = _entry("npu_conv_transpose2d_backward")
    e2.samples += [Sample("all", grad_args)]
    e2.errors += [ErrorSample("grad_shape", lambda: ((grad_args()[0][0], _rand(2, 6, 8, 8),
                                                      *grad_args()[0][2:]), {}), RuntimeError,
                              "npu_conv_transpose2d_backward: expected grad_output the forward")]

    def grad_args_3d():
        x, w, _b, padding, output_padding, stride, dilation, groups = _transpose_args(3)
        return (x, _rand(2, 6, 5, 8, 7, seed=3), w, padding, output_padding, stride, dilation,
                groups, [True, False, True]), {}

    e3 = _entry("npu_conv_transpose3d_backward")
    e3.samples += [Sample("input_bias", grad_args_3d)]
    e3.errors += [ErrorSample("rank", lambda: ((_transpose_args()[0], *grad_args_3d()[0][1:]),
                                               {}), ValueError,
                              "npu_conv_transpose3d_backward: expected input a 5-D tensor")]
    e = _entry("npu_convolution_transpose_backward")
    e.samples += [Sample("fp16_weight_bias", lambda: grad_args((False, True, True),
                                                               torch.float16))]
    e.errors += [
        ErrorSample("mask_len", lambda: ((*grad_args()[0][:8], [True, True]), {}), RuntimeError,
                    "npu_convolution_transpose_backward"),
    ]


_transposed_conv()


def _masked_causal() -> None:
    def args(dtype=torch.bfloat16, s=9, b=2, h=5, mask=True, grad=False):
        x = _rand(s, b, h, dtype=dtype)
        w = _rand(3, h, dtype=dtype, seed=1)
        kw = {}
        if mask:
            kw["mask"] = torch.rand(b, s, generator=torch.Generator().manual_seed(2)) > 0.3
        pos = (x, w) if not grad else (_rand(s, b, h, dtype=dtype, seed=3), x, w)
        return pos, kw

    e = _entry("npu_masked_causal_conv1d")
    e.samples += [
        Sample("fp64_mask", lambda: args(torch.float64), differentiable=True),
    ]
    e.errors += [
        ErrorSample("window", lambda: ((_rand(9, 2, 5), _rand(4, 5)), {}), RuntimeError,
                    "npu_masked_causal_conv1d: expected weight the shape \\[W, H\\] = \\(3, 5\\)"),
        ErrorSample("mask_shape", lambda: ((_rand(9, 2, 5), _rand(3, 5)),
                                           dict(mask=torch.ones(9, 2, dtype=torch.bool))),
                    RuntimeError, "npu_masked_causal_conv1d: expected mask the shape \\[B, S\\]"),
        ErrorSample("mask_dtype", lambda: ((_rand(9, 2, 5), _rand(3, 5)),
                                           dict(mask=torch.ones(2, 9))),
                    TypeError, "npu_masked_causal_conv1d: expected mask dtype in"),
    ]
    e = _entry("npu_masked_causal_conv1d_backward")
    e.samples += [
        Sample("fp16_mask", lambda: args(torch.float16, grad=True)),
    ]
    e.errors += [
        ErrorSample("grad_shape", lambda: ((_rand(8, 2, 5), _rand(9, 2, 5), _rand(3, 5)), {}),
                    RuntimeError,
                    "npu_masked_causal_conv1d_backward: expected grad_output the shape"),
    ]


_masked_causal()


def _varlen(dtype=torch.bfloat16, state_len=2, **kw):
    """Three sequences (4, 2, 3 tokens) of dim 16 over five cache lines."""
    x = _rand(9, 16, dtype=dtype)
    weight = _rand(3, 16, dtype=dtype, seed=1)
    states = _rand(5, state_len, 16, dtype=dtype, seed=2)
    kw.setdefault("query_start_loc", torch.tensor([0, 4, 6, 9], dtype=torch.int32))
    kw.setdefault("cache_indices", torch.tensor([3, 0, 4], dtype=torch.int32))
    kw.setdefault("num_computed_tokens", torch.tensor([0, 5, 2], dtype=torch.int32))
    return (x, weight, states), kw


def _fused_causal() -> None:
    prefill = _varlen

    def decode_3d(dtype=torch.float16):
        x = _rand(3, 3, 16, dtype=dtype)
        weight = _rand(3, 16, dtype=dtype, seed=1)
        states = _rand(4, 4, 16, dtype=dtype, seed=2)
        return (x, weight, states), dict(
            cache_indices=torch.tensor([1, 3, 0], dtype=torch.int32),
            num_accepted_tokens=torch.tensor([1, 3, 2], dtype=torch.int32),
            num_computed_tokens=torch.tensor([7, 1, 4], dtype=torch.int32),
            residual_connection=1, conv_mode="pangu")

    e = _entry("npu_fused_causal_conv1d")
    e.samples += [Sample("prefill_bf16", prefill), Sample("decode_3d_pangu_fp16", decode_3d)]
    e.errors += [
        ErrorSample("no_query_start_loc", lambda: prefill(query_start_loc=None), RuntimeError,
                    "npu_fused_causal_conv1d: expected query_start_loc a tensor when x is 2-D"),
        ErrorSample("window", lambda: ((_rand(9, 16), _rand(4, 16), _rand(5, 2, 16)),
                                       prefill()[1]), RuntimeError,
                    "npu_fused_causal_conv1d: expected weight the shape \\[K, dim\\]"),
        ErrorSample("conv_mode", lambda: prefill(conv_mode="mamba"), ValueError,
                    "npu_fused_causal_conv1d: expected conv_mode one of"),
        ErrorSample("apc_without_first", lambda: prefill(
            cache_indices=torch.zeros(3, 2, dtype=torch.int32),
            block_idx_last_scheduled_token=torch.zeros(3, dtype=torch.int32)), RuntimeError,
            "npu_fused_causal_conv1d: expected block_idx_first_scheduled_token a tensor"),
    ]


_fused_causal()


def _deformable() -> None:
    def args(dtype=torch.float32, modulated=True, dg=2):
        x = _rand(1, 2, 4, 3, dtype=dtype)
        w = _rand(2, 1, 2, 2, dtype=dtype, seed=1)
        off = (_rand(1, dg * 4 * (3 if modulated else 2), 4, 2, seed=2) * 1.3).to(dtype)
        return (x, w, off, _rand(2, dtype=dtype, seed=3), [2, 2], [1, 1, 1, 2],
                [1, 0, 0, 1], [1, 1, 1, 1], 2, dg, modulated), {}

    e = _entry("npu_deformable_conv2d")
    e.samples += [
        Sample("fp64_modulated_groups", lambda: args(torch.float64), differentiable=True),
    ]
    e.errors += [
        ErrorSample("offset_shape", lambda: ((*args()[0][:2], _rand(1, 24, 3, 2),
                                              *args()[0][3:]), {}), RuntimeError,
                    "npu_deformable_conv2d: expected offset the shape"),
        ErrorSample("stride_nc", lambda: ((*args()[0][:5], [2, 1, 1, 2], *args()[0][6:]), {}),
                    ValueError, "npu_deformable_conv2d: expected stride 1 in its N and C"),
        ErrorSample("deformable_groups", lambda: ((*args()[0][:9], 3, True), {}), ValueError,
                    "npu_deformable_conv2d: expected deformable_groups a positive divisor"),
    ]

    def grad_args(dtype=torch.float32):
        (x, w, off, _b, *rest), _ = args(dtype)
        grad = _rand(1, 2, 4, 2, dtype=dtype, seed=4)
        deform = _rand(1, 2, 8, 4, dtype=dtype, seed=5)
        return (x, grad, deform, w, off, *rest), {}

    e = _entry("npu_deformable_conv2dbk")
    e.samples += [Sample("fp16", lambda: grad_args(torch.float16))]
    e.errors += [
        ErrorSample("offset_out_shape", lambda: ((*grad_args()[0][:2], _rand(1, 2, 8, 3),
                                                  *grad_args()[0][3:]), {}), RuntimeError,
                    "npu_deformable_conv2dbk: expected offset_out the shape"),
    ]


_deformable()


def _fused_causal_v2() -> None:
    def args(**kw):
        kw.setdefault("num_accepted_tokens", torch.tensor([1, 2, 2], dtype=torch.int32))
        return _varlen(state_len=3, **kw)

    e = _entry("npu_fused_causal_conv1d_v2")
    e.samples += [Sample("mixed_pangu_residual", lambda: args(conv_mode="pangu",
                                                              residual_connection=1))]
    e.errors += [
        ErrorSample("states_dim", lambda: ((_rand(9, 16), _rand(3, 16), _rand(5, 3, 8)),
                                           args()[1]), RuntimeError,
                    "npu_fused_causal_conv1d_v2: expected conv_states a 3-D"),
    ]


_fused_causal_v2()
