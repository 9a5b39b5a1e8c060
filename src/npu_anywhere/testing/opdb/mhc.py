"""Op database entries of the mHC family (npu_mhc_pre, npu_mhc_post, npu_mhc_sinkhorn and
their backward ops)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=_gen(seed), dtype=torch.float64).to(dtype)


def _pre_inputs(lead=(3,), n=4, d=16, dtype=torch.bfloat16, with_res=True, param=torch.float32):
    rows = n * n + 2 * n if with_res else 2 * n
    x = _randn(*lead, n, d, dtype=dtype, seed=1)
    phi = _randn(rows, n * d, dtype=param, seed=2) * 0.1
    alpha = torch.tensor([0.5, 0.7, 0.9][:3 if with_res else 2], dtype=param)
    bias = _randn(rows, dtype=param, seed=3) * 0.1
    gamma = _randn(n, d, dtype=param, seed=4) * 0.5 + 1
    return x, phi, alpha, bias, gamma


def _pre() -> None:
    def fwd(**kw):
        x, phi, alpha, bias, gamma = _pre_inputs(**kw)
        return (x, phi, alpha, bias), dict(gamma=gamma, out_flag=1)

    e = _entry("npu_mhc_pre")
    e.samples += [
        Sample("tnd_fp64_gamma", lambda: fwd(dtype=torch.float64, param=torch.float64),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("n", lambda: ((_randn(2, 3, 16, dtype=torch.bfloat16),
                                   _randn(15, 48), torch.ones(3), torch.zeros(15)), {}),
                    ValueError, "npu_mhc_pre: expected x n \\(its size\\(-2\\)\\) one of"),
        ErrorSample("d_alignment", lambda: ((_randn(2, 4, 8, dtype=torch.bfloat16),
                                            _randn(24, 32), torch.ones(3), torch.zeros(24)), {}),
                    ValueError, "npu_mhc_pre: expected x D \\(its last size\\) a multiple"),
        ErrorSample("phi_rows", lambda: (_pre_inputs()[:1] + (_randn(8, 64), torch.ones(3),
                                                              torch.zeros(8)), {}),
                    RuntimeError, "npu_mhc_pre: expected phi the shape"),
        ErrorSample("out_flag", lambda: (fwd()[0], dict(out_flag=2)), ValueError,
                    "npu_mhc_pre: expected out_flag one of"),
    ]

    def bwd(lead=(3,), dtype=torch.bfloat16, grad_x_post=False):
        x, phi, alpha, bias, gamma = _pre_inputs(lead, dtype=dtype)
        from npu_anywhere.ops.mhc.pre import mhc_pre_reference
        _, h_post, _, inv_rms, h_mix, h_pre = mhc_pre_reference(x, phi, alpha, bias,
                                                                gamma=gamma, out_flag=1)
        grads = (_randn(*lead, 16, dtype=dtype, seed=5), _randn(*lead, 4, seed=6),
                 _randn(*lead, 4, 4, seed=7))
        kw = dict(gamma=gamma)
        if grad_x_post:
            kw["grad_x_post"] = _randn(*x.shape, dtype=dtype, seed=8)
        return (x, phi, alpha, *grads, inv_rms, h_mix, h_pre, h_post), kw

    b = _entry("npu_mhc_pre_backward")
    b.samples += [
        Sample("bsnd_bf16_grad_x_post", lambda: bwd((1, 2), grad_x_post=True)),
    ]
    b.errors += [
        ErrorSample("h_mix_shape", lambda: (bwd()[0][:7] + (torch.zeros(3, 8),)
                                            + bwd()[0][8:], {}), RuntimeError,
                    "npu_mhc_pre_backward: expected h_mix the shape"),
    ]


_pre()


def _post_inputs(lead=(3,), n=4, d=8, dtype=torch.float16, res=True):
    x = _randn(*lead, n, d, dtype=dtype, seed=11)
    h_res = torch.rand(*lead, n, n, generator=_gen(12), dtype=torch.float64).to(
        torch.float64 if dtype == torch.float64 else torch.float32) if res else None
    h_out = _randn(*lead, d, dtype=dtype, seed=13)
    h_post = torch.rand(*lead, n, generator=_gen(14), dtype=torch.float64).to(
        torch.float64 if dtype == torch.float64 else torch.float32)
    return x, h_res, h_out, h_post


def _post() -> None:
    e = _entry("npu_mhc_post")
    e.samples += [
        Sample("tnd_fp64", lambda: (_post_inputs(dtype=torch.float64), {}), differentiable=True),
    ]
    e.errors += [
        ErrorSample("x_dtype", lambda: ((_randn(3, 4, 8),) + _post_inputs()[1:], {}), TypeError,
                    "npu_mhc_post: expected x dtype float16 or bfloat16"),
        ErrorSample("h_res_shape", lambda: ((_post_inputs()[0], torch.rand(3, 4, 5))
                                            + _post_inputs()[2:], {}), RuntimeError,
                    "npu_mhc_post: expected h_res the shape"),
    ]
    b = _entry("npu_mhc_post_backward")
    b.samples += [
        Sample("tnd_fp16", lambda: ((_randn(3, 4, 8, dtype=torch.float16, seed=15),)
                                    + _post_inputs(), {})),
    ]
    b.errors += [
        ErrorSample("grad_y_shape", lambda: ((_randn(3, 4, 4, dtype=torch.float16),)
                                             + _post_inputs(), {}), RuntimeError,
                    "grad_y shape must be the same as x shape"),
    ]


_post()


def _sinkhorn() -> None:
    e = _entry("npu_mhc_sinkhorn")
    e.samples += [
        # out_flag=1: the flat intermediates go through the explicit fake and the autograd
        Sample("bsnn_fp64_out_flag", lambda: ((_randn(1, 2, 6, 6, dtype=torch.float64),),
                                              dict(num_iters=2, out_flag=1)),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("n", lambda: ((_randn(2, 5, 5),), {}), ValueError,
                    "npu_mhc_sinkhorn: expected x n \\(its size\\(-2\\)\\) one of"),
        ErrorSample("num_iters", lambda: ((_randn(2, 4, 4),), dict(num_iters=0)), ValueError,
                    "npu_mhc_sinkhorn: expected num_iters in \\[1, 100\\]"),
    ]

    def bwd(lead=(3,), n=4, iters=2):
        x = _randn(*lead, n, n, seed=21)
        from npu_anywhere.ops.mhc.sinkhorn import mhc_sinkhorn_reference
        _, norm, sums = mhc_sinkhorn_reference(x, num_iters=iters, out_flag=1)
        return (_randn(*lead, n, n, seed=22), norm, sums), {}

    b = _entry("npu_mhc_sinkhorn_backward")
    b.samples += [
        Sample("tnn_n4", lambda: bwd()),
    ]
    b.errors += [
        ErrorSample("sum_size", lambda: (bwd()[0][:2] + (torch.zeros(5),), {}), RuntimeError,
                    "npu_mhc_sinkhorn_backward: expected sum 2 \\* num_iters"),
    ]


_sinkhorn()
