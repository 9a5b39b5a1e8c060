"""Op database entries of the inference-attention ops (npu_fused_infer_attention_score, its two
graph helpers, npu_prompt_flash_attention, npu_incre_flash_attention).

Samples are tiny (opcheck runs each several times) and cover the main call forms: BNSD with GQA
and lse, BSH decode with a (B, KV_S) mask, TND + paged KV chunked prefill with sparse_mode 3,
int8 KV antiquant, NSD, full int8 (PFA), the MLA tree mask (sparse_mode 9).  Error samples are metadata errors only (FakeTensor must raise them too).
"""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

FIA = "npu_fused_infer_attention_score"


def _r(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _causal():
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _bnsd_gqa_lse():
    q, k, v = _r(2, 4, 3, 8), _r(2, 2, 5, 8, seed=1), _r(2, 2, 5, 8, seed=2)
    return (q, k, v), dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.35,
                           actual_seq_lengths=[3, 2], actual_seq_lengths_kv=[5, 4],
                           softmax_lse_flag=True)


def _bsh_decode_mask():
    q, k = _r(2, 1, 16, dtype=torch.float16), _r(2, 6, 16, seed=1, dtype=torch.float16)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    return (q, k, k), dict(num_heads=2, atten_mask=mask, actual_seq_lengths_kv=[6, 5])


def _tnd_paged_causal():
    q = _r(5, 2, 16, dtype=torch.bfloat16)
    cache = _r(4, 16, 32, seed=1, dtype=torch.bfloat16)
    table = torch.tensor([[1, 3], [0, 2]], dtype=torch.int32)
    return (q, cache, cache), dict(num_heads=2, num_key_value_heads=2, input_layout="TND",
                                   block_table=table, block_size=16, actual_seq_lengths=[2, 5],
                                   actual_seq_lengths_kv=[20, 7], sparse_mode=3,
                                   atten_mask=_causal(), softmax_lse_flag=True)


def _int8_kv():
    q = _r(2, 2, 1, 16, dtype=torch.float16)
    k8 = torch.randint(-8, 8, (2, 2, 4, 16), generator=torch.Generator().manual_seed(1),
                       dtype=torch.int8)
    scale = (_r(2, 2, 1, 16, seed=3).abs() * 0.1).half()
    return (q, k8, k8), dict(num_heads=2, input_layout="BNSD", antiquant_scale=scale)


def _float64_bsnd():
    q, k = _r(1, 3, 2, 8, dtype=torch.float64), _r(1, 4, 2, 8, seed=1, dtype=torch.float64)
    return (q, k, k), dict(num_heads=2, input_layout="BSND", next_tokens=0,
                           atten_mask=torch.zeros(3, 4, dtype=torch.bool))


def _nsd_value_d_unequal():
    q, k, v = _r(2, 3, 8), _r(1, 4, 8, seed=1), _r(1, 4, 4, seed=2)
    return (q, k, v), dict(num_heads=2, num_key_value_heads=1, input_layout="NSD",
                           softmax_lse_flag=True)


def _bsnd_mla_tree_mask():
    """sparse_mode 9: MLA with rope, a (B, Q_S, Q_S) tree mask over the last Q_S keys."""
    q, qr = _r(1, 3, 2, 16), _r(1, 3, 2, 8, seed=1)
    k, kr = _r(1, 5, 1, 16, seed=2), _r(1, 5, 1, 8, seed=3)
    tree = torch.tensor([[[0, 1, 1], [0, 0, 1], [0, 1, 0]]], dtype=torch.bool)
    return (q, k, k), dict(query_rope=qr, key_rope=kr, atten_mask=tree, sparse_mode=9,
                           num_heads=2, num_key_value_heads=1, input_layout="BSND",
                           softmax_lse_flag=True)


def _bad(**kwargs):
    def make():
        (q, k, v), base = _bnsd_gqa_lse()
        base.update(kwargs)
        return (q, k, v), base
    return make


def _fia_errors():
    return [
        ErrorSample("layout", _bad(input_layout="SBH"), ValueError, "input_layout"),
        ErrorSample("kv_heads", _bad(num_key_value_heads=3), ValueError, "num_key_value_heads"),
        ErrorSample("mode1_no_mask", _bad(sparse_mode=1), ValueError, "atten_mask"),
        ErrorSample("mask_shape", _bad(atten_mask=torch.ones(1, 2, 3, 5, dtype=torch.bool)),
                    ValueError, "atten_mask"),
        ErrorSample("tree_mask_needs_rope", _bad(sparse_mode=9), ValueError, "sparse_mode"),
        ErrorSample("q_lengths", _bad(actual_seq_lengths=[4, 1]), ValueError,
                    "actual_seq_lengths"),
    ]


e = _entry(FIA)
e.samples += [Sample("bnsd_gqa_lse", _bnsd_gqa_lse), Sample("bsh_decode_mask", _bsh_decode_mask),
              Sample("tnd_paged_causal", _tnd_paged_causal), Sample("int8_kv", _int8_kv),
              Sample("float64_bsnd_band", _float64_bsnd),
              Sample("nsd_value_d_unequal", _nsd_value_d_unequal),
              Sample("bsnd_mla_tree_mask", _bsnd_mla_tree_mask)]
e.errors += _fia_errors()

e = _entry("_npu_fused_infer_attention_score_get_max_workspace")
e.samples += [Sample("bnsd", _bnsd_gqa_lse)]
e.errors += [ErrorSample("layout", _bad(input_layout="SBH"), ValueError, "input_layout")]


def _infer_output():
    q, v = _r(2, 3, 32), _r(2, 5, 16, seed=1)
    return (q, v), dict(num_heads=4, num_key_value_heads=2, softmax_lse_flag=True)


e = _entry("_npu_fused_infer_attention_score_infer_output")
e.samples += [Sample("bsh_gqa", _infer_output)]
e.errors += [ErrorSample("heads", lambda: ((_r(1, 1, 8), _r(1, 2, 8)), dict(num_heads=0)),
                         ValueError, "num_heads")]


def _pfa():
    q, k = _r(2, 3, 16), _r(2, 4, 16, seed=1)
    return (q, k, k), dict(num_heads=2, atten_mask=torch.zeros(3, 4, dtype=torch.bool),
                           actual_seq_lengths=[3, 2], scale_value=0.25)


def _pfa_full_int8():
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randint(-16, 16, shape, generator=gen, dtype=torch.int8)
            for shape in ((1, 2, 3, 32), (1, 2, 4, 32)))
    return (q, k, k), dict(num_heads=2, input_layout="BNSD", deq_scale1=torch.tensor([0.02]),
                           quant_scale1=torch.tensor([60.0]), deq_scale2=torch.tensor([0.001]),
                           next_tokens=65535)


e = _entry("npu_prompt_flash_attention")
e.samples += [Sample("bsh_causal_band", _pfa), Sample("bnsd_full_int8", _pfa_full_int8)]
e.errors += [ErrorSample("layout", lambda: (_pfa()[0], dict(num_heads=2, input_layout="NTD")),
                         ValueError, "input_layout")]


def _ifa():
    q, k = _r(2, 1, 16), _r(2, 5, 16, seed=1)
    return (q, k, k), dict(num_heads=2, actual_seq_lengths=[5, 3], scale_value=0.5)


e = _entry("npu_incre_flash_attention")
e.samples += [Sample("bsh_lengths", _ifa)]
e.errors += [ErrorSample("two_tokens", lambda: ((_r(1, 2, 16), _r(1, 5, 16), _r(1, 5, 16)),
                                                dict(num_heads=2)), ValueError, "Q_S == 1")]


# -- v2 ------------------------------------------------------------------------------------

def _v2_tnd_sink():
    q, k = _r(5, 4, 16), _r(7, 2, 16, seed=1)
    return (q, k, k), dict(num_query_heads=4, num_key_value_heads=2, input_layout="TND",
                           actual_seq_qlen=[2, 5], actual_seq_kvlen=[4, 7], sparse_mode=3,
                           atten_mask=_causal(), learnable_sink=_r(4, seed=2),
                           return_softmax_lse=True, softmax_scale=0.25)


def _v2_bsh_nbsd():
    q, k = _r(2, 1, 32), _r(2, 4, 32, seed=1)
    return (q, k, k), dict(num_query_heads=4, input_layout="BSH_NBSD", actual_seq_kvlen=[4, 2])


def _v2_bad(**kwargs):
    def make():
        args, base = _v2_bsh_nbsd()
        base.update(kwargs)
        return args, base
    return make


e = _entry("npu_fused_infer_attention_score_v2")
e.samples += [Sample("tnd_sink_causal", _v2_tnd_sink), Sample("bsh_nbsd_decode", _v2_bsh_nbsd)]
e.errors += [ErrorSample("sink_shape", _v2_bad(learnable_sink=torch.ones(3)), RuntimeError,
                         "learnable_sink"),
             ErrorSample("hifloat8_query", _v2_bad(query_dtype=290), NotImplementedError,
                         "query_dtype"),
             ErrorSample("layout", _v2_bad(input_layout="SBH"), ValueError, "input_layout")]

e = _entry("_npu_fused_infer_attention_score_v2_get_max_workspace")
e.samples += [Sample("bsh", _v2_bsh_nbsd)]
e.errors += [ErrorSample("layout", _v2_bad(input_layout="SBH"), ValueError, "input_layout")]

e = _entry("_npu_fused_infer_attention_score_v2_infer_output")
e.samples += [Sample("bsh_gqa", lambda: ((_r(2, 3, 32), _r(2, 5, 16, seed=1)),
                                         dict(num_query_heads=4, num_key_value_heads=2,
                                              return_softmax_lse=True)))]
e.errors += [ErrorSample("heads", lambda: ((_r(1, 1, 8), _r(1, 2, 8)), dict(num_query_heads=0)),
                         ValueError, "num_query_heads")]
