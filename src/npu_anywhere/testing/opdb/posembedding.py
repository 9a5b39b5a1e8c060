"""Op database entries of the position-embedding family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

# -- posembedding -----------------------------------------------------------------------------

def _rotary_mul_samples() -> None:
    e = _entry("npu_rotary_mul")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for mode in ("half", "interleave"):
            e.samples.append(Sample(
                f"bsnd_{mode}_{dtype}".replace("torch.", ""),
                lambda dtype=dtype, mode=mode: ((_g(2, 3, 4, 8, dtype=dtype),
                                                 _g(1, 3, 1, 8, dtype=dtype),
                                                 _g(1, 3, 1, 8, dtype=dtype), mode), {})))
    e.samples.append(Sample("mixed_dtypes", lambda: ((_g(2, 3, 4, 8, dtype=torch.bfloat16),
                                                      _g(1, 3, 1, 8), _g(1, 3, 1, 8,
                                                                         dtype=torch.float16)), {})))
    e.samples.append(Sample("rotate_matrix", lambda: ((_g(2, 3, 4, 8), _g(1, 3, 1, 8),
                                                       _g(1, 3, 1, 8), "half", _g(8, 8)), {})))
    e.samples.append(Sample("grad_fp64", lambda: ((_g(2, 3, 2, 6, dtype=torch.float64),
                                                   _g(2, 3, 1, 6, dtype=torch.float64),
                                                   _g(1, 3, 1, 6, dtype=torch.float64)), {}),
                            differentiable=True))
    e.errors += [
        ErrorSample("quarter_mode", lambda: ((_g(1, 2, 2, 8), _g(1, 2, 1, 8), _g(1, 2, 1, 8),
                                              "quarter"), {}), ValueError,
                    "npu_rotary_mul: expected rotary_mode one of"),
        ErrorSample("odd_d", lambda: ((_g(1, 2, 2, 7), _g(1, 2, 1, 7), _g(1, 2, 1, 7)), {}),
                    ValueError, "npu_rotary_mul: expected input a last dim"),
        ErrorSample("integer_r1", lambda: ((_g(1, 2, 2, 8), torch.ones(1, 2, 1, 8, dtype=torch.int32),
                                            _g(1, 2, 1, 8)), {}), TypeError,
                    "npu_rotary_mul: expected r1 dtype in"),
        ErrorSample("bad_broadcast", lambda: ((_g(1, 2, 2, 8), _g(1, 3, 1, 8), _g(1, 2, 1, 8)),
                                              {}), RuntimeError,
                    "npu_rotary_mul: expected r1 a shape broadcastable"),
    ]
    b = _entry("npu_rotary_mul_backward")
    b.samples.append(Sample("half", lambda: ((_g(2, 3, 4, 8), _g(2, 3, 4, 8), _g(1, 3, 1, 8),
                                              _g(1, 3, 1, 8), "half"), {})))
    b.samples.append(Sample("interleave_bf16", lambda: (
        tuple(_g(*s, dtype=torch.bfloat16) for s in ((2, 3, 4, 8), (2, 3, 4, 8), (1, 1, 4, 8),
                                                     (1, 1, 4, 8))) + ("interleave",), {})))
    b.errors.append(ErrorSample("grad_shape", lambda: ((_g(2, 3, 4, 6), _g(2, 3, 4, 8),
                                                        _g(1, 3, 1, 8), _g(1, 3, 1, 8)), {}),
                                RuntimeError, "npu_rotary_mul_backward: expected grad the shape"))


_LAYOUT_SHAPES = {  # layout: (query, key, cos)
    "BSND": ((2, 3, 4, 8), (2, 3, 2, 8), (1, 3, 1, 8)),
    "BSH": ((2, 3, 4, 8), (2, 3, 2, 8), (2, 3, 1, 8)),
    "SBND": ((3, 2, 4, 8), (3, 2, 2, 8), (3, 1, 1, 8)),
    "BNSD": ((2, 4, 3, 8), (2, 2, 3, 8), (2, 1, 3, 8)),
    "TND": ((5, 4, 8), (5, 2, 8), (5, 1, 8)),
}


def _pair(layout: str, dtype=torch.float32):
    q, k, c = _LAYOUT_SHAPES[layout]
    return _g(*q, dtype=dtype), _g(*k, dtype=dtype), _g(*c, dtype=dtype), _g(*c, dtype=dtype)


def _pair_errors(op: str) -> list[ErrorSample]:
    return [
        ErrorSample("bad_layout", lambda: (_pair("BSND") + ("XYZ", "half"), {}), ValueError,
                    f"{op}: expected layout one of"),
        ErrorSample("bad_mode", lambda: (_pair("BSND") + ("BSND", "full"), {}), ValueError,
                    f"{op}: expected rotary_mode one of"),
        ErrorSample("quarter_d", lambda: ((_g(1, 2, 2, 6), _g(1, 2, 2, 6), _g(1, 2, 1, 6),
                                           _g(1, 2, 1, 6), "BSND", "quarter"), {}), ValueError,
                    f"{op}: expected query a last dim .D. divisible by 4"),
        ErrorSample("cos_n", lambda: ((_g(1, 2, 2, 8), _g(1, 2, 2, 8), _g(1, 2, 2, 8),
                                       _g(1, 2, 2, 8)), {}), RuntimeError,
                    f"{op}: expected cos N"),
        ErrorSample("key_s", lambda: ((_g(1, 2, 2, 8), _g(1, 3, 2, 8), _g(1, 2, 1, 8),
                                       _g(1, 2, 1, 8)), {}), RuntimeError,
                    f"{op}: expected key the shape of query"),
        ErrorSample("partial_cos", lambda: ((_g(1, 2, 2, 8), _g(1, 2, 2, 8), _g(1, 2, 1, 4),
                                             _g(1, 2, 1, 4)), {}), NotImplementedError,
                    f"{op}: expected cos a last dim"),
        ErrorSample("mixed_dtype", lambda: ((_g(1, 2, 2, 8), _g(1, 2, 2, 8, dtype=torch.float16),
                                             _g(1, 2, 1, 8), _g(1, 2, 1, 8)), {}), TypeError,
                    f"{op}: expected key the same dtype"),
    ]


def _apply_rotary_pos_emb_samples() -> None:
    e = _entry("apply_rotary_pos_emb")
    for layout in _LAYOUT_SHAPES:
        for mode in ("half", "quarter", "interleave"):
            e.samples.append(Sample(f"{layout}_{mode}",
                                    lambda layout=layout, mode=mode:
                                        (_pair(layout) + (layout, mode), {})))
    e.samples.append(Sample("bf16", lambda: (_pair("BSND", torch.bfloat16), {})))
    e.samples.append(Sample("grad_fp64", lambda: (_pair("SBND", torch.float64) + ("SBND",), {}),
                            differentiable=True))
    e.errors += _pair_errors("apply_rotary_pos_emb")
    e.errors.append(ErrorSample("empty", lambda: ((_g(0, 2, 2, 8), _g(0, 2, 2, 8),
                                                   _g(0, 2, 1, 8), _g(0, 2, 1, 8)), {}),
                                ValueError, "apply_rotary_pos_emb: expected query a non-empty"))

    n = _entry("npu_apply_rotary_pos_emb")
    for layout in ("BSND", "SBND", "BNSD", "TND"):
        n.samples.append(Sample(f"{layout}_half", lambda layout=layout:
                                (_pair(layout) + (layout, "half"), {})))
    n.samples.append(Sample("TND_interleave_kw", lambda: (_pair("TND"), {"layout": "TND",
                                                                         "rotary_mode":
                                                                         "interleave"})))
    n.errors += _pair_errors("npu_apply_rotary_pos_emb")

    g = _entry("apply_rotary_pos_emb_grad")
    for code, layout in ((1, "BSND"), (2, "SBND"), (3, "BNSD"), (4, "TND")):
        g.samples.append(Sample(f"{layout}_with_qk", lambda layout=layout, code=code: (
            _pair(layout), {"query": _pair(layout)[0] * 0 + 1, "key": _pair(layout)[1],
                            "layout": code})))
        g.samples.append(Sample(f"{layout}_no_qk", lambda layout=layout, code=code: (
            _pair(layout), {"layout": code})))
    g.errors.append(ErrorSample("quarter", lambda: (_pair("BSND"), {"rotary_mode": "quarter"}),
                                ValueError, "apply_rotary_pos_emb_grad: expected rotary_mode"))
    g.errors.append(ErrorSample("query_only", lambda: (_pair("BSND"), {"query": _g(2, 3, 4, 8)}),
                                ValueError, "apply_rotary_pos_emb_grad: expected query and key"))
    g.errors.append(ErrorSample("layout_code", lambda: (_pair("BSND"), {"layout": 7}),
                                ValueError, "apply_rotary_pos_emb_grad: expected layout"))


_rotary_mul_samples()
_apply_rotary_pos_emb_samples()


def _transposed(sample):
    """The same call with query and key given as transposed (column-major) tensors."""
    (pos, query, key, cache, head), kwargs = sample
    return (pos, query.t().contiguous().t(), key.t().contiguous().t(), cache, head), kwargs


def _mrope_samples() -> None:
    e = _entry("npu_mrope")
    tokens, rot = 5, 64

    def make(dtype=torch.float32, head=64, rot=rot, sections=None, mode="half", cache="default",
             rows=3):
        cache_t = _g(11, rot, dtype=dtype)
        if sections is None:
            pos = torch.randint(0, 11, (tokens,))
        else:
            pos = torch.randint(0, 11, (rows, tokens))
        kwargs = {"mrope_section": sections, "rotary_mode": mode, "cache_mode": cache}
        return (pos, _g(tokens, 2 * head, dtype=dtype), _g(tokens, head, dtype=dtype), cache_t,
                head), kwargs

    e.samples += [
        Sample("rope_half", lambda: make()),
        Sample("rope_interleaved_partial", lambda: make(head=96, rot=64, mode="interleaved")),
        Sample("mrope_default", lambda: make(sections=[8, 12, 12])),
        Sample("mrope_interleave_cache", lambda: make(sections=[8, 12, 12], cache="interleave")),
        Sample("mrope_4_sections_bf16", lambda: make(dtype=torch.bfloat16, sections=[8, 8, 8, 8],
                                                     rows=4)),
        Sample("rope_transposed_query", lambda: _transposed(make())),
    ]
    e.errors += [
        ErrorSample("bad_mode", lambda: make(mode="quarter"), ValueError,
                    "npu_mrope: expected rotary_mode one of"),
        ErrorSample("sections_sum", lambda: make(sections=[8, 8, 8]), ValueError,
                    "npu_mrope: expected mrope_section non-negative sections summing"),
        ErrorSample("positions_rows", lambda: make(sections=[8, 12, 12], rows=4), ValueError,
                    "npu_mrope: expected positions shape"),
        ErrorSample("head_size_multiple", lambda: make(head=40, rot=32), ValueError,
                    "npu_mrope: expected head_size a positive multiple of 16"),
        ErrorSample("interleave_cache_with_4_sections",
                    lambda: make(sections=[8, 8, 8, 8], rows=4, cache="interleave"), ValueError,
                    "npu_mrope: expected cache_mode 'default' with a 4-section"),
    ]


def _interleave_rope_samples() -> None:
    e = _entry("npu_interleave_rope")
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        e.samples.append(Sample(f"s_full_{dtype}".replace("torch.", ""), lambda dtype=dtype: (
            (_g(2, 3, 4, 64, dtype=dtype), _g(2, 1, 4, 64, dtype=dtype),
             _g(2, 1, 4, 64, dtype=dtype)), {})))
    e.samples.append(Sample("s_one", lambda: ((_g(2, 3, 4, 64, dtype=torch.float16),
                                               _g(2, 1, 1, 64, dtype=torch.float16),
                                               _g(2, 1, 1, 64, dtype=torch.float16)), {})))
    e.errors += [
        ErrorSample("d_not_64", lambda: ((_g(1, 2, 3, 32), _g(1, 1, 3, 32), _g(1, 1, 3, 32)),
                                         {}), ValueError,
                    "npu_interleave_rope: expected x a last dim"),
        ErrorSample("cos_n", lambda: ((_g(1, 2, 3, 64), _g(1, 2, 3, 64), _g(1, 2, 3, 64)), {}),
                    RuntimeError, "npu_interleave_rope: expected cos N"),
    ]


_mrope_samples()
_interleave_rope_samples()
