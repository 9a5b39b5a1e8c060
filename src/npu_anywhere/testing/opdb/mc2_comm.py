"""Op database entries of the mc2_comm family (matmuls fused with a collective).  The samples
run on one rank (an unknown ``hcom``): the collectives are the identity, the rest is exercised;
the multi-process behaviour is in tests/ops/mc2_comm."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

HCOM = "no_group"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _f(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=_gen(seed)).to(dtype)


def _i8(*shape, seed=0):
    return torch.randint(-8, 8, shape, generator=_gen(seed), dtype=torch.int8)


def _all_reduce() -> None:
    e = _entry("npu_mm_all_reduce_base")
    e.samples += [
        Sample("bf16_3d_bias_x3", lambda: ((_f(2, 3, 16, dtype=torch.bfloat16),
                                            _f(8, 16, dtype=torch.bfloat16, seed=1).t(), HCOM),
                                           dict(bias=_f(8, dtype=torch.bfloat16, seed=2),
                                                x3=_f(2, 3, 8, dtype=torch.bfloat16, seed=3)))),
        Sample("quant_pertoken", lambda: ((_i8(5, 16), _i8(16, 8, seed=1), HCOM), dict(
            dequant_scale=torch.rand(8, generator=_gen(2)), pertoken_scale=torch.rand(5),
            bias=torch.arange(8, dtype=torch.int32), y_dtype=15))),
    ]
    e.errors += [
        ErrorSample("reduce_op", lambda: ((_f(4, 16), _f(16, 8), HCOM), dict(reduce_op="max")),
                    ValueError, "npu_mm_all_reduce_base: expected reduce_op 'sum'"),
        ErrorSample("k", lambda: ((_f(4, 16), _f(15, 8), HCOM), {}), RuntimeError,
                    "npu_mm_all_reduce_base: expected x2 16 rows"),
        ErrorSample("no_antiquant_scale", lambda: ((_f(4, 16), _i8(16, 8), HCOM), {}),
                    ValueError, "npu_mm_all_reduce_base: expected antiquant_scale a tensor"),
        ErrorSample("comm_quant", lambda: ((_i8(4, 16), _i8(16, 8), HCOM), dict(
            dequant_scale=torch.rand(8), comm_quant_scale_1=torch.rand(8).half())),
            NotImplementedError, "npu_mm_all_reduce_base: expected comm_quant_scale_1 None"),
    ]


def _tp() -> None:
    e = _entry("npu_all_gather_base_mm")
    e.samples += [
        Sample("fp16_bias", lambda: ((_f(5, 16), _f(16, 8, seed=1), HCOM, 1),
                                     dict(bias=_f(8, seed=2)))),
        Sample("int8_pertoken_no_gather", lambda: ((_i8(4, 16), _i8(16, 8, seed=1), HCOM, 1),
                                                   dict(x1_scale=torch.rand(4, 1),
                                                        x2_scale=torch.rand(1, 8),
                                                        gather_output=False,
                                                        output_dtype=torch.float16))),
    ]
    e.errors += [
        ErrorSample("world_size", lambda: ((_f(4, 16), _f(16, 8), HCOM, 2), {}), ValueError,
                    "npu_all_gather_base_mm: expected world_size the size of the group"),
        ErrorSample("gather_index", lambda: ((_f(4, 16), _f(16, 8), HCOM, 1),
                                             dict(gather_index=1)), ValueError,
                    "npu_all_gather_base_mm: expected gather_index 0"),
    ]
    e = _entry("npu_mm_reduce_scatter_base")
    e.samples += [
        Sample("bf16", lambda: ((_f(6, 16, dtype=torch.bfloat16),
                                 _f(16, 8, dtype=torch.bfloat16, seed=1), HCOM, 1), {})),
        Sample("int8_int64_scale", lambda: ((_i8(4, 16), _i8(16, 8, seed=1), HCOM, 1), dict(
            x2_scale=torch.ops.npu.npu_trans_quant_param(torch.rand(1, 8))))),
    ]
    e.errors += [
        ErrorSample("x2_dtype", lambda: ((_f(4, 16), _f(16, 8, dtype=torch.bfloat16), HCOM, 1),
                                         {}), TypeError,
                    "npu_mm_reduce_scatter_base: expected x2 the dtype of input"),
        ErrorSample("int8_no_scale", lambda: ((_i8(4, 16), _i8(16, 8), HCOM, 1), {}),
                    ValueError, "npu_mm_reduce_scatter_base: expected x2_scale a tensor"),
    ]


def _ep() -> None:
    def args(**kw):
        return (_f(7, 16), _f(2, 16, 8, seed=1), HCOM, 1, [5, 2], [5, 2]), kw

    e = _entry("npu_alltoallv_gmm")
    e.samples += [
        Sample("permute_out", lambda: args(permute_out_flag=True)),
        Sample("shared_expert_trans", lambda: ((_f(7, 16), _f(2, 8, 16, seed=1), HCOM, 1,
                                                [3, 4], [3, 4]),
                                               dict(mm_x=_f(3, 16, seed=2),
                                                    mm_weight=_f(4, 16, seed=3),
                                                    trans_gmm_weight=True,
                                                    trans_mm_weight=True))),
    ]
    e.errors += [
        ErrorSample("counts_len", lambda: ((_f(7, 16), _f(2, 16, 8), HCOM, 1, [7], [7]), {}),
                    ValueError, "npu_alltoallv_gmm: expected send_counts e \\* ep_world_size"),
        ErrorSample("rows", lambda: ((_f(6, 16), _f(2, 16, 8), HCOM, 1, [5, 2], [5, 2]), {}),
                    RuntimeError, "npu_alltoallv_gmm: expected gmm_x sum\\(send_counts\\)"),
    ]
    e = _entry("npu_gmm_alltoallv")
    e.samples += [
        Sample("plain", lambda: args()),
        Sample("shared_expert", lambda: args(mm_x=_f(3, 16, seed=2), mm_weight=_f(16, 4, seed=3))),
    ]
    e.errors += [
        ErrorSample("counts_tensor", lambda: args(send_counts_tensor=torch.tensor([5, 2])),
                    NotImplementedError, "npu_gmm_alltoallv: expected send_counts_tensor None"),
        ErrorSample("mm_weight_alone", lambda: args(mm_weight=_f(16, 4)), ValueError,
                    "npu_gmm_alltoallv: expected mm_weight given exactly when mm_x is"),
    ]


_all_reduce()
_tp()
_ep()


def _ep_quant() -> None:
    hf8 = 290                                     # torch_npu.hifloat8

    def args(op_kw=None, **kw):
        codes = torch.randint(0, 100, (7, 16), generator=_gen(0), dtype=torch.uint8)
        weight = torch.randint(0, 100, (2, 16, 8), generator=_gen(1), dtype=torch.uint8)
        kw = dict(gmm_x_quant_mode=1, gmm_weight_quant_mode=1, gmm_x_dtype=hf8,
                  gmm_weight_dtype=hf8, **kw)
        return (codes, weight, torch.tensor([0.5]), torch.tensor([0.25]), HCOM, 1, [5, 2],
                [5, 2], 5), kw

    def shared(**kw):
        return args(mm_x=torch.randint(0, 100, (3, 16), generator=_gen(2), dtype=torch.uint8),
                    mm_weight=torch.randint(0, 100, (16, 4), generator=_gen(3),
                                            dtype=torch.uint8),
                    mm_x_scale=torch.tensor([2.0]), mm_weight_scale=torch.tensor([0.125]),
                    mm_x_quant_mode=1, mm_weight_quant_mode=1, mm_x_dtype=hf8,
                    mm_weight_dtype=hf8, mm_y_dtype=15, **kw)

    e = _entry("npu_alltoallv_quant_gmm")
    e.samples += [Sample("permute_out", lambda: args(permute_out_flag=True)),
                  Sample("shared_expert", lambda: shared())]
    e.errors += [
        ErrorSample("mx_mode", lambda: (args()[0], {**args()[1], "gmm_x_quant_mode": 6}),
                    NotImplementedError,
                    "npu_alltoallv_quant_gmm: expected gmm_x_quant_mode 1"),
        ErrorSample("x_dtype", lambda: (args()[0], {**args()[1], "gmm_x_dtype": 291}),
                    ValueError, "npu_alltoallv_quant_gmm: expected gmm_x_dtype torch_npu"),
    ]
    e = _entry("npu_quant_gmm_alltoallv")
    e.samples += [Sample("plain", lambda: args()), Sample("shared_expert", lambda: shared())]
    e.errors += [
        ErrorSample("comm_quant", lambda: args(comm_quant_scale=torch.ones(8)),
                    NotImplementedError, "npu_quant_gmm_alltoallv: expected comm_quant_scale"),
        ErrorSample("scale_shape", lambda: ((*args()[0][:2], torch.ones(2), *args()[0][3:]),
                                            args()[1]), RuntimeError,
                    "npu_quant_gmm_alltoallv: expected gmm_x_scale shape \\(1,\\)"),
    ]


_ep_quant()
