"""Op database entries of the MoE routing family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_I32 = torch.int32


def _ids(n, k, experts, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, experts, (n, k), generator=gen, dtype=_I32)


def _row_idx(n, k):
    return torch.arange(n * k, dtype=_I32).view(k, n).t().contiguous()


def _gating() -> None:
    e = _entry("npu_moe_gating_top_k_softmax")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        e.samples.append(Sample(f"2d_{str(dtype)[6:]}", lambda dtype=dtype:
                                ((_g(5, 8, dtype=dtype), None, 3), {})))
    e.samples.append(Sample("3d_finished", lambda: (
        (_g(2, 3, 6), torch.tensor([[True, False, False], [False, True, False]]), 2), {})))
    e.errors += [
        ErrorSample("k_too_big", lambda: ((_g(3, 4), None, 5), {}), ValueError,
                    "npu_moe_gating_top_k_softmax: expected k in"),
        ErrorSample("one_d", lambda: ((_g(4), None, 1), {}), ValueError,
                    "npu_moe_gating_top_k_softmax: expected x a 2-D or 3-D tensor"),
        ErrorSample("finished_shape", lambda: ((_g(3, 4), torch.zeros(4, dtype=torch.bool), 1),
                                               {}), RuntimeError,
                    "npu_moe_gating_top_k_softmax: expected finished the shape"),
    ]
    v2 = _entry("npu_moe_gating_top_k_softmax_v2")
    for renorm, soft in ((0, False), (0, True), (1, False)):
        v2.samples.append(Sample(f"renorm{renorm}_softmax{soft}", lambda r=renorm, s=soft: (
            (_g(4, 7, dtype=torch.float16),), {"k": 2, "renorm": r, "output_softmax": s})))
    v2.samples.append(Sample("3d_finished", lambda: (
        (_g(2, 2, 5),), {"k": 3, "finished": torch.tensor([[True, False], [False, False]]),
                         "output_softmax": True})))
    v2.errors += [
        ErrorSample("renorm", lambda: ((_g(3, 4),), {"k": 1, "renorm": 3}), ValueError,
                    "npu_moe_gating_top_k_softmax_v2: expected renorm"),
        ErrorSample("k_zero", lambda: ((_g(3, 4),), {"k": 0}), ValueError,
                    "npu_moe_gating_top_k_softmax_v2: expected k in"),
    ]


def _init_routing() -> None:
    e = _entry("npu_moe_init_routing")
    for dtype in (torch.float32, torch.bfloat16):
        e.samples.append(Sample(f"k2_{str(dtype)[6:]}", lambda dtype=dtype: (
            (_g(5, 8, dtype=dtype), _row_idx(5, 2), _ids(5, 2, 4), 5), {})))
    e.samples.append(Sample("active_fewer", lambda: ((_g(6, 4), _row_idx(6, 3), _ids(6, 3, 5), 2),
                                                     {})))
    e.errors += [
        ErrorSample("expert_dtype", lambda: ((_g(5, 8), _row_idx(5, 2), _ids(5, 2, 4).long(), 5),
                                             {}), TypeError,
                    "npu_moe_init_routing: expected expert_idx dtype in"),
        ErrorSample("active_negative", lambda: ((_g(5, 8), _row_idx(5, 2), _ids(5, 2, 4), -2),
                                                {}), ValueError,
                    "npu_moe_init_routing: expected active_num >= 0"),
    ]
    t = _entry("npu_moe_compute_expert_tokens")
    t.samples.append(Sample("sorted", lambda: (
        (torch.sort(_ids(1, 20, 7).reshape(-1)).values, 6), {})))
    t.errors.append(ErrorSample("two_d", lambda: ((_ids(2, 3, 4), 4), {}), ValueError,
                                "npu_moe_compute_expert_tokens: expected sorted_expert_for_"
                                "source_row a 1-D tensor"))


def _init_routing_v2() -> None:
    e = _entry("npu_moe_init_routing_v2")
    base = {"expert_num": 6, "expert_tokens_num_flag": True}
    e.samples += [
        Sample("dropless_count_range", lambda: ((_g(5, 8), _ids(5, 3, 6)), dict(
            base, active_num=15, expert_tokens_num_type=1, active_expert_range=[1, 5],
            scale=_g(5)))),
        Sample("dropless_cumsum_scatter", lambda: ((_g(5, 8, dtype=torch.bfloat16), _ids(5, 3, 6)),
                                                   dict(base, expert_tokens_num_type=0,
                                                        row_idx_type=1))),
        Sample("key_value_dynamic_quant", lambda: ((_g(4, 16), _ids(4, 2, 6)), dict(
            base, expert_tokens_num_type=2, quant_mode=1, scale=_g(6, 16)))),
        Sample("static_quant_active", lambda: ((_g(4, 8, dtype=torch.float16), _ids(4, 2, 6)), dict(
            base, active_num=5, expert_tokens_num_type=1, quant_mode=0, scale=torch.tensor([2.0]),
            offset=torch.tensor([0.5])))),
        Sample("drop_pad", lambda: ((_g(6, 8), _ids(6, 2, 6)), dict(
            base, drop_pad_mode=1, expert_capacity=2, expert_tokens_num_type=1))),
        Sample("drop_pad_dynamic_quant", lambda: ((_g(6, 8), _ids(6, 2, 6)), dict(
            base, drop_pad_mode=1, expert_capacity=3, quant_mode=1))),
        Sample("no_counts_int8", lambda: ((torch.ones(3, 4, dtype=torch.int8), _ids(3, 2, 4)),
                                          {"expert_num": 4})),
        # One MX sample (opcheck of the MX arithmetic costs seconds); drop/pad MX: op tests.
        Sample("mxfp8_e4m3_amax_active", lambda: ((_g(2, 40, dtype=torch.bfloat16),
                                                   _ids(2, 2, 6)),
                                                  dict(base, active_num=3, quant_mode=17))),
        Sample("hif8_per_token", lambda: ((_g(3, 8, dtype=torch.float16), _ids(3, 2, 6)),
                                          dict(base, quant_mode=8))),
        Sample("int4_dynamic", lambda: ((_g(3, 8), _ids(3, 2, 6)),
                                        dict(base, quant_mode=13, scale=_g(1, 8)))),
    ]
    e.errors += [
        ErrorSample("expert_num", lambda: ((_g(4, 8), _ids(4, 2, 4)), {}), ValueError,
                    "npu_moe_init_routing_v2: expected expert_num in"),
        ErrorSample("capacity", lambda: ((_g(4, 8), _ids(4, 2, 4)),
                                         {"expert_num": 4, "drop_pad_mode": 1}), ValueError,
                    "npu_moe_init_routing_v2: expected expert_capacity > 0"),
        ErrorSample("hif8_needs_scale", lambda: ((_g(4, 8), _ids(4, 2, 4)),
                                                 {"expert_num": 4, "quant_mode": 7}),
                    ValueError, "npu_moe_init_routing_v2: expected scale a \\(1,\\) tensor when "
                                "quant_mode is 7"),
        ErrorSample("scale_shape", lambda: ((_g(4, 8), _ids(4, 2, 4)),
                                            {"expert_num": 4, "scale": _g(3)}), RuntimeError,
                    "npu_moe_init_routing_v2: expected scale shape"),
    ]


def _finalize() -> None:
    e = _entry("npu_moe_finalize_routing")
    n, k, h, experts = 4, 2, 6, 5

    def perm():
        return torch.randperm(n * k, generator=torch.Generator().manual_seed(0)).to(_I32)

    for dtype in (torch.float32, torch.bfloat16):
        e.samples.append(Sample(f"mode0_full_{str(dtype)[6:]}", lambda dtype=dtype: (
            (_g(n * k, h, dtype=dtype), _g(n, h, dtype=dtype), _g(n, h, dtype=dtype),
             _g(experts, h, dtype=dtype), _g(n, k, dtype=dtype), perm(), _ids(n, k, experts),
             0), {})))
    e.samples.append(Sample("mode2_no_optionals", lambda: (
        (_g(n * k, h), None, None, None, None, perm(), None, 2), {"k": k})))
    e.samples.append(Sample("mode1_drop_pad", lambda: (
        (_g(experts, 3, h), _g(n, h), None, _g(experts, h), _g(n, k),
         torch.tensor([0, -1, 4, 7, 14, -1, 2, 9], dtype=_I32), _ids(n, k, experts), 1), {})))
    e.samples.append(Sample("mode3_drop_pad_row_order", lambda: (
        (_g(experts, 3, h), None, None, None, _g(n, k),
         torch.tensor([0, -1, 4, 7, 14, -1, 2, 9], dtype=_I32), None, 3), {})))
    e.errors += [
        ErrorSample("mode", lambda: ((_g(n * k, h), None, None, None, _g(n, k), perm(), None, 5),
                                     {}), ValueError,
                    "npu_moe_finalize_routing: expected drop_pad_mode one of"),
        ErrorSample("skip2_alone", lambda: ((_g(n * k, h), None, _g(n, h), None, _g(n, k), perm(),
                                             None, 0), {}), ValueError,
                    "npu_moe_finalize_routing: expected skip2 None when skip1 is None"),
        ErrorSample("rows_dims", lambda: ((_g(n * k, h), None, None, None, _g(n, k), perm(), None,
                                           1), {}), ValueError,
                    "npu_moe_finalize_routing: expected expanded_permuted_rows a 3-D tensor"),
    ]


_gating()
_init_routing()
_init_routing_v2()
_finalize()


def _permute() -> None:
    def data(dtype=torch.bfloat16):
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randn(5, 4, generator=gen).to(dtype)
        indices = torch.randint(0, 3, (5, 2), generator=gen)
        return tokens, indices

    def inv(indices):
        perm = torch.sort(indices.reshape(-1), stable=True).indices
        out = torch.empty_like(perm)
        out[perm] = torch.arange(perm.numel())
        return out.to(_I32)

    p = _entry("npu_moe_token_permute")
    p.samples += [
        Sample("bf16_all", lambda: (data(), {})),
        Sample("num_out_pos_int32", lambda: ((data()[0], data()[1].to(_I32), 7), {})),
        Sample("num_out_negative", lambda: ((*data(torch.float32), -3), {})),
        Sample("fp64_num_out", lambda: ((*data(torch.float64), 8), {})),
    ]
    p.errors += [
        ErrorSample("padded", lambda: ((*data(), None, True), {}), ValueError,
                    "npu_moe_token_permute: expected padded_mode False"),
        ErrorSample("indices_dtype", lambda: ((data()[0], data()[1].float()), {}), TypeError,
                    "npu_moe_token_permute: expected indices dtype in"),
    ]
    pg = _entry("npu_moe_token_permute_grad")
    pg.samples.append(Sample("num_out_7", lambda: (
        (data()[0], torch.randn(7, 4).to(torch.bfloat16), data()[1], inv(data()[1])), {})))
    pg.errors.append(ErrorSample("sorted_len", lambda: (
        (data()[0], torch.randn(7, 4), data()[1], inv(data()[1])[:4]), {}), RuntimeError,
        "npu_moe_token_permute_grad: expected sorted_indices"))
    u = _entry("npu_moe_token_unpermute")
    u.samples += [
        Sample("probs_bf16", lambda: ((torch.randn(10, 4).to(torch.bfloat16), inv(data()[1]),
                                       torch.rand(5, 2).to(torch.bfloat16)), {})),
        Sample("dropped_no_probs", lambda: ((torch.randn(6, 4), inv(data()[1])), {})),
        # Integer sorted_indices cannot require grad: gradcheck lives in tests/ops/moe.
        Sample("fp64_dropped", lambda: ((torch.randn(8, 3, dtype=torch.float64), inv(data()[1]),
                                         torch.rand(5, 2, dtype=torch.float64)), {})),
    ]
    u.errors.append(ErrorSample("probs_size", lambda: (
        (torch.randn(10, 4), inv(data()[1]), torch.rand(3, 2)), {}), RuntimeError,
        "npu_moe_token_unpermute: expected probs"))
    ug = _entry("npu_moe_token_unpermute_grad")
    ug.samples += [
        Sample("probs", lambda: ((torch.randn(8, 4), torch.randn(5, 4), inv(data()[1]),
                                  torch.rand(5, 2)), {})),
        Sample("no_probs", lambda: ((torch.randn(10, 4), torch.randn(10, 4), inv(data()[1])),
                                    {})),
    ]
    ug.errors.append(ErrorSample("grad_shape", lambda: (
        (torch.randn(8, 4), torch.randn(4, 4), inv(data()[1]), torch.rand(5, 2)), {}),
        RuntimeError, "npu_moe_token_unpermute_grad: expected grad_unpermuted_tokens shape"))
    ug2 = _entry("npu_moe_token_unpermute_grad_v2")
    # One sample (the probs path is the v1 op's code, tested in tests/ops/moe).
    ug2.samples.append(Sample("no_table", lambda: (
        (torch.randn(10, 4).to(torch.bfloat16), inv(data()[1]), 10, torch.bfloat16), {})))
    ug2.errors.append(ErrorSample("probs_without_table", lambda: (
        (torch.randn(5, 4), inv(data()[1]), 8, torch.float32, torch.rand(5, 2)), {}),
        ValueError, "npu_moe_token_unpermute_grad_v2: expected permuted_tokens a tensor"))


_permute()


def _re_routing() -> None:
    e = _entry("npu_moe_re_routing")
    counts = lambda dtype=torch.int64: torch.tensor([[2, 0, 1], [1, 3, 0]], dtype=dtype)
    e.samples.append(Sample("fp16_scales", lambda: ((torch.randn(7, 6).half(), counts()),
                                                    {"per_token_scales": torch.rand(7)})))
    e.errors.append(ErrorSample("idx_type", lambda: ((torch.randn(7, 6).half(), counts()),
                                                     {"idx_type": 1}), ValueError,
                                "npu_moe_re_routing: expected idx_type 0"))


_re_routing()
