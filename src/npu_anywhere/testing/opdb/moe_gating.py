"""Op database entries of npu_moe_gating_top_k and its backward."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _x(rows, experts, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, experts, generator=gen).to(dtype)


def _grouped(dtype=torch.float32, **kw):
    args = dict(bias=_x(1, 16, dtype, seed=1)[0], k_group=2, group_count=4)
    args.update(kw)
    return (_x(5, 16, dtype), 3), args


def _forward() -> None:
    e = _entry("npu_moe_gating_top_k")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        e.samples.append(Sample(f"sigmoid_sum2_{str(dtype)[6:]}", lambda dtype=dtype: _grouped(
            dtype, group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)))
    e.samples += [
        Sample("softmax_max_out_flag", lambda: _grouped(out_flag=True)),
        Sample("no_bias_no_groups", lambda: ((_x(4, 7), 2), {})),
        Sample("sigmoid_fp64", lambda: _grouped(torch.float64, group_select_mode=1, norm_type=1),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("k_too_big", lambda: ((_x(5, 16), 9), dict(k_group=2, group_count=4)),
                    ValueError,
                    "npu_moe_gating_top_k: expected k in "),
        ErrorSample("group_count_divisor", lambda: ((_x(3, 10), 2), dict(group_count=4)),
                    ValueError, "npu_moe_gating_top_k: expected group_count a divisor"),
        ErrorSample("k_group_too_big", lambda: ((_x(3, 16), 2), dict(k_group=5, group_count=4)),
                    ValueError, "npu_moe_gating_top_k: expected k_group in "),
        ErrorSample("bias_shape", lambda: ((_x(3, 16), 2), dict(bias=torch.zeros(8))),
                    RuntimeError, "npu_moe_gating_top_k: expected bias the shape"),
        ErrorSample("bias_dtype", lambda: ((_x(3, 16), 2), dict(bias=torch.zeros(16).half())),
                    TypeError, "npu_moe_gating_top_k: expected bias the same dtype as x"),
        ErrorSample("renorm", lambda: ((_x(3, 16), 2), dict(renorm=1)), ValueError,
                    "npu_moe_gating_top_k: expected renorm 0"),
        ErrorSample("three_d", lambda: ((torch.randn(2, 3, 8), 2), {}), ValueError,
                    "npu_moe_gating_top_k: expected x a 2-D tensor"),
        ErrorSample("hash_table_width", lambda: ((_x(3, 16), 2), dict(
            input_ids=torch.zeros(3, dtype=torch.int32),
            tid2eid=torch.zeros(4, 3, dtype=torch.int32))), RuntimeError,
            "npu_moe_gating_top_k: expected tid2eid a last dim equal to k = 2"),
    ]
    e.samples += [
        Sample("hash_sigmoid_int64_ids", lambda: ((_x(5, 16), 3), dict(
            input_ids=torch.tensor([2, 0, 3, 2, 1]),
            tid2eid=torch.tensor([[1, 4, 9], [15, 0, 7], [3, 3, 2], [8, 12, 5]],
                                 dtype=torch.int32), norm_type=1, routed_scaling_factor=1.5))),
    ]


def _backward() -> None:
    def args(dtype=torch.float32, **kw):
        gen = torch.Generator().manual_seed(3)
        x_norm = torch.rand(4, 12, generator=gen, dtype=torch.float64)
        ids = torch.stack([torch.randperm(12, generator=gen)[:3] for _ in range(4)])
        x_norm = x_norm if dtype == torch.float64 else x_norm.float()
        grad = torch.randn(4, 3, generator=gen, dtype=torch.float64).to(dtype)
        return (x_norm, grad, ids.to(torch.int32)), dict(dict(norm_type=1), **kw)

    e = _entry("npu_moe_gating_top_k_backward")
    for dtype in (torch.float32, torch.bfloat16):
        e.samples.append(Sample(f"sigmoid_{str(dtype)[6:]}", lambda dtype=dtype: args(
            dtype, routed_scaling_factor=2.0)))
    e.samples.append(Sample("sigmoid_fp64", lambda: args(torch.float64)))
    e.errors += [
        ErrorSample("softmax", lambda: args(norm_type=0), ValueError,
                    "npu_moe_gating_top_k_backward: expected norm_type 1"),
        ErrorSample("ids_dtype", lambda: ((torch.rand(4, 12), torch.randn(4, 3),
                                           torch.zeros(4, 3, dtype=torch.int64)),
                                          dict(norm_type=1)), TypeError,
                    "npu_moe_gating_top_k_backward: expected expertIdx dtype"),
        ErrorSample("grad_rows", lambda: ((torch.rand(4, 12), torch.randn(5, 3),
                                           torch.zeros(5, 3, dtype=torch.int32)),
                                          dict(norm_type=1)), RuntimeError,
                    "npu_moe_gating_top_k_backward: expected grad_y the shape"),
    ]


_forward()
_backward()
