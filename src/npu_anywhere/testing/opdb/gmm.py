"""Op database entries of the grouped matmul family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g


def _counts():
    return torch.tensor([2, 0, 3], dtype=torch.int64)       # an empty middle group


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


def _int4_packed(*shape):
    """Random int32 words: eight arbitrary int4 values each."""
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=torch.int32)


def _scale_words(*shape):
    return torch.full(shape, 0x3C000000, dtype=torch.int64)


def _grouped_matmul() -> None:
    e = _entry("npu_grouped_matmul")
    m_grouped = {"group_list": None, "split_item": 3, "group_type": 0, "group_list_type": 1}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        tag = str(dtype).replace("torch.", "")
        e.samples.append(Sample(f"m_grouped_{tag}", lambda dtype=dtype: (
            ([_g(5, 4, dtype=dtype)], [_g(3, 4, 6, dtype=dtype)]),
            {**m_grouped, "group_list": _counts()})))
    e.samples += [
        Sample("m_grouped_weight_list_bias_cumsum", lambda: (
            ([_g(5, 4)], [_g(4, 6), _g(4, 6), _g(4, 6)]),
            {"bias": [_g(6), _g(6), _g(6)], "group_list": _counts().cumsum(0),
             "split_item": 2, "group_type": 0, "group_list_type": 0})),
        Sample("ungrouped_lists", lambda: (
            ([_g(2, 3, 4), _g(1, 2, 5)], [_g(4, 6), _g(5, 3)]),
            {"split_item": 0, "group_type": -1})),
        Sample("k_grouped_single_out", lambda: (
            ([_g(5, 4).T], [_g(5, 6)]),
            {"group_list": _counts(), "split_item": 3, "group_type": 2,
             "group_list_type": 1})),
        Sample("k_grouped_list_out", lambda: (
            ([_g(4, 5)], [_g(5, 6)]),
            {"group_list": _counts().cumsum(0), "split_item": 0, "group_type": 2,
             "group_list_type": 0})),
        Sample("int8_per_token_bf16", lambda: (
            ([_int8(5, 4)], [_int8(3, 4, 6)]),
            {"scale": [torch.rand(3, 6, dtype=torch.bfloat16)],
             "per_token_scale": [torch.rand(5)], "group_list": _counts(), "split_item": 3,
             "group_type": 0, "group_list_type": 1, "output_dtype": torch.bfloat16,
             "act_type": 5})),
        # Formula 2-2: a float bias after the per-channel dequantization.
        Sample("int8_per_channel_float_bias", lambda: (
            ([_int8(5, 4)], [_int8(3, 4, 6)]),
            {"bias": [torch.randn(3, 6, dtype=torch.float16)], "scale": [torch.rand(3, 6)],
             "group_list": _counts(), "split_item": 3, "group_type": 0,
             "group_list_type": 1, "output_dtype": torch.float16})),
        Sample("int8_packed_scale_index_rows", lambda: (
            ([_int8(5, 4)], [_int8(3, 4, 6)]),
            {"scale": [torch.full((3, 6), (1 << 46) | 0x3C000000, dtype=torch.int64)],
             "group_list": torch.tensor([[2, 3], [0, 2]]), "split_item": 3, "group_type": 0,
             "group_list_type": 2})),
        Sample("antiquant_int8_fp16", lambda: (
            ([_g(5, 4, dtype=torch.float16)], [_int8(3, 4, 6)]),
            {"antiquant_scale": [_g(3, 6, dtype=torch.float16)],
             "antiquant_offset": [_g(3, 6, dtype=torch.float16)], "group_list": _counts(),
             "split_item": 3, "group_type": 0, "group_list_type": 1})),
        Sample("antiquant_int4_per_group", lambda: (
            ([_g(5, 4, dtype=torch.bfloat16)],
             [torch.randint(-2 ** 31, 2 ** 31 - 1, (3, 4, 2), dtype=torch.int32)]),
            {"antiquant_scale": [_g(3, 2, 16, dtype=torch.bfloat16)], "group_list": _counts(),
             "split_item": 3, "group_type": 0, "group_list_type": 1})),
        # int4 values packed 8 per int32; scale words hold float32 0.0078125 in the low word.
        Sample("a8w4_per_group", lambda: (
            ([_int8(5, 512)], [_int4_packed(3, 512, 1)]),
            {"bias": [torch.rand(3, 8)], "scale": [_scale_words(3, 2, 8)],
             "per_token_scale": [torch.rand(5)], "group_list": _counts(), "split_item": 3,
             "group_type": 0, "group_list_type": 1, "output_dtype": torch.float16})),
        Sample("a4w4_per_channel", lambda: (
            ([_int4_packed(5, 2)], [_int4_packed(3, 16, 1)]),
            {"scale": [_scale_words(3, 8)], "per_token_scale": [torch.rand(5)],
             "group_list": _counts().cumsum(0), "split_item": 2, "group_type": 0,
             "group_list_type": 0, "output_dtype": torch.bfloat16})),
    ]
    e.errors += [
        ErrorSample("group_type_none", lambda: (([_g(5, 4)], [_g(3, 4, 6)]),
                                                {"group_list": _counts(), "split_item": 3}),
                    ValueError, "npu_grouped_matmul: expected group_type one of"),
        ErrorSample("k_mismatch", lambda: (([_g(5, 4)], [_g(3, 5, 6)]),
                                           {**m_grouped, "group_list": _counts()}),
                    RuntimeError, "npu_grouped_matmul: expected x\\[0\\] k = 5 columns"),
        ErrorSample("split_for_ungrouped", lambda: (([_g(5, 4)], [_g(4, 6)]),
                                                    {"split_item": 2, "group_type": -1}),
                    ValueError, "npu_grouped_matmul: expected split_item 0 or 1"),
        ErrorSample("group_list_length", lambda: (([_g(5, 4)], [_g(3, 4, 6)]),
                                                  {**m_grouped, "group_list": _counts()[:2]}),
                    ValueError, "npu_grouped_matmul: expected group_list one entry per"),
        ErrorSample("quant_without_scale", lambda: (([_int8(5, 4)], [_int8(3, 4, 6)]),
                                                    {**m_grouped, "group_list": _counts()}),
                    ValueError, "npu_grouped_matmul: expected scale a list of tensors"),
    ]


def _finalize_routing() -> None:
    e = _entry("npu_grouped_matmul_finalize_routing")

    def base():
        return (_int8(6, 4), _int8(3, 4, 8), torch.tensor([2, 0, 3]))

    e.samples += [
        Sample("combine_shared", lambda: (base(), {
            "scale": torch.rand(3, 8), "pertoken_scale": torch.rand(6), "logit": torch.rand(6),
            "row_index": torch.tensor([0, 2, 1, 0, 2, 1]),
            "shared_input": _g(2, 8, dtype=torch.bfloat16), "shared_input_offset": 1,
            "output_bs": 3})),
        Sample("plain_cumsum", lambda: (base()[:2] + (torch.tensor([2, 2, 5]),), {
            "scale": torch.rand(3, 8), "group_list_type": 0})),
        # a8w4: packed int4 weight [e, k, n/8], int64 scale words [e, 1, n], bias, offset.
        Sample("a8w4_offset", lambda: ((_int8(6, 16), _int4_packed(3, 16, 2),
                                        torch.tensor([2, 0, 3])), {
            "scale": _scale_words(3, 1, 16), "bias": torch.rand(3, 16),
            "offset": torch.rand(3, 1, 16), "pertoken_scale": torch.rand(6),
            "logit": torch.rand(6), "row_index": torch.tensor([0, 2, 1, 0, 2, 1]),
            "output_bs": 3})),
    ]
    e.errors += [
        ErrorSample("float_x", lambda: ((_g(6, 4), _int8(3, 4, 8), torch.tensor([2, 0, 3])),
                                        {"scale": torch.rand(3, 8)}), TypeError,
                    "npu_grouped_matmul_finalize_routing: expected x dtype in"),
        ErrorSample("scale_shape", lambda: (base(), {"scale": torch.rand(3, 7)}),
                    RuntimeError, "npu_grouped_matmul_finalize_routing: expected scale shape"),
    ]


def _swiglu_quant() -> None:
    def base():
        return _int8(6, 4), _int8(3, 4, 8)

    e = _entry("npu_grouped_matmul_swiglu_quant")
    for dtype in (torch.float32, torch.bfloat16):
        tag = str(dtype).replace("torch.", "")
        e.samples.append(Sample(f"cumsum_{tag}", lambda dtype=dtype: (
            (*base(), torch.tensor([2, 2, 5]), torch.rand(3, 8).to(dtype), torch.rand(6)), {})))
    # A8W4: packed int4 weight (3-D, and the 5-D NZ storage [e, n/64, k/16, 16, 8] with a
    # per-group [e, G, n] scale), bias as the assist matrix.
    e.samples += [
        Sample("a8w4", lambda: ((_int8(6, 16), _int4_packed(3, 16, 2), torch.tensor([1, 2, 3]),
                                 _scale_words(3, 16), torch.rand(6)),
                                {"bias": torch.rand(3, 16)})),
        Sample("a8w4_nz_per_group", lambda: ((_int8(6, 16), _int4_packed(3, 1, 1, 16, 8),
                                              torch.tensor([2, 2, 5]), _scale_words(3, 2, 64),
                                              torch.rand(6)), {"bias": torch.rand(3, 64)})),
    ]
    e.errors.append(ErrorSample("odd_n", lambda: (
        (_int8(6, 4), _int8(3, 4, 7), torch.tensor([2, 2, 5]), torch.rand(3, 7),
         torch.rand(6)), {}), ValueError,
        "npu_grouped_matmul_swiglu_quant: expected weight an even n"))
    e.errors.append(ErrorSample("a8w4_without_bias", lambda: (
        (_int8(6, 16), _int4_packed(3, 16, 2), torch.tensor([1, 2, 3]), _scale_words(3, 16),
         torch.rand(6)), {}), ValueError,
        "npu_grouped_matmul_swiglu_quant: expected bias a float32 .e, n. tensor"))
    v2 = _entry("npu_grouped_matmul_swiglu_quant_v2")
    v2.samples += [
        # [1, 2, 3] is valid read as a cumsum and as counts (the fuzz test retypes the mode).
        Sample("cumsum", lambda: ((base()[0], [base()[1]], [torch.rand(3, 8)], torch.rand(6),
                                   torch.tensor([1, 2, 3])), {})),
        Sample("counts", lambda: ((base()[0], [base()[1]], [torch.rand(3, 8)], torch.rand(6),
                                   _counts()), {"group_list_type": 1, "quant_dtype": 0})),
        # A8W4: packed int4 weight [e, k, n/8], int64 scale words (float32 1/128 in the low
        # word), the offline assist matrix; A4W4: packed int4 x too, and a smooth scale.
        Sample("a8w4", lambda: ((_int8(6, 16), [_int4_packed(3, 16, 2)],
                                 [_scale_words(3, 16)], torch.rand(6), torch.tensor([1, 2, 3])),
                                {"weight_assist_matrix": [torch.rand(3, 16)]})),
        Sample("a4w4_per_group", lambda: ((_int4_packed(6, 2), [_int4_packed(3, 16, 2)],
                                           [_scale_words(3, 2, 16)], torch.rand(6),
                                           _counts()),
                                          {"smooth_scale": torch.rand(3),
                                           "group_list_type": 1})),
        # The Ascend 950 MXFP8 form cannot be a sample (opcheck multiplies its float8 inputs,
        # which PyTorch lacks on CPU): tests/ops/gmm/test_grouped_matmul_swiglu_quant_mx.py
        # runs its FakeTensor and compile checks.
        # The 5-D FRACTAL_NZ weight [e, n/32, k/16, 16, 32] (k = 16, n = 32).
        Sample("nz_weight", lambda: ((_int8(6, 16), [_int8(3, 1, 1, 16, 32)],
                                      [torch.rand(3, 32)], torch.rand(6),
                                      torch.tensor([1, 2, 3])), {})),
    ]
    v2.errors.append(ErrorSample("two_weights", lambda: (
        (_int8(6, 4), [_int8(3, 4, 8)] * 2, [torch.rand(3, 8)], torch.rand(6),
         _counts()), {}), ValueError,
        "npu_grouped_matmul_swiglu_quant_v2: expected weight a list of one"))


def _ffn() -> None:
    e = _entry("npu_ffn")
    half = torch.float16
    e.samples += [
        Sample("gelu_fp16", lambda: ((_g(3, 4, dtype=half), _g(4, 6, dtype=half),
                                      _g(6, 4, dtype=half), "gelu"), {"inner_precise": 1})),
        Sample("experts_bf16_bias", lambda: (
            (_g(5, 4, dtype=torch.bfloat16), _g(2, 4, 6, dtype=torch.bfloat16),
             _g(2, 6, 4, dtype=torch.bfloat16), "silu"),
            {"expert_tokens": [2, 3], "bias1": _g(2, 6), "bias2": _g(2, 4)})),
        Sample("swiglu_fp16", lambda: ((_g(3, 4, dtype=half), _g(4, 12, dtype=half),
                                        _g(6, 4, dtype=half), "swiglu"), {})),
        Sample("antiquant", lambda: ((_g(3, 4, dtype=half), _int8(4, 6), _int8(6, 4), "relu"),
                                     {"antiquant_scale1": _g(6, dtype=half),
                                      "antiquant_scale2": _g(4, dtype=half)})),
        Sample("quant", lambda: ((_int8(3, 4), _int8(4, 6), _int8(6, 4), "relu"),
                                 {"scale": torch.tensor([0.1]), "offset": torch.tensor([1.0]),
                                  "deq_scale1": torch.rand(6), "deq_scale2": torch.rand(4)})),
    ]
    e.errors += [
        ErrorSample("activation", lambda: ((_g(3, 4, dtype=half), _g(4, 6, dtype=half),
                                            _g(6, 4, dtype=half), "tanh"), {}), ValueError,
                    "npu_ffn: expected activation one of"),
        ErrorSample("n2", lambda: ((_g(3, 4, dtype=half), _g(4, 6, dtype=half),
                                    _g(6, 5, dtype=half), "relu"), {}), RuntimeError,
                    "npu_ffn: expected weight2 N2 = K1 = 4"),
    ]


_grouped_matmul()
_finalize_routing()
_swiglu_quant()
_ffn()
