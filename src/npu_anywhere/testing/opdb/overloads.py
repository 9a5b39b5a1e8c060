"""Op database entries of the named overloads (``<op>.<overload>``: ``.out``, ``.List``).

An overload is an op of its own in the registry (``REGISTRY["npu_grouped_matmul.List"]``), so
its entry is keyed the same way and the generic tests run opcheck, fake-vs-eager, identical
errors and compile on it like on any op.  The ``.out`` samples pass output tensors of exactly
the shapes the call produces.
"""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry


def _r(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# -- npu_fused_infer_attention_score(.out, _v2.out) -----------------------------------------

def _fia_out(**over):
    def make():
        q, k = _r(1, 2, 3, 8), _r(1, 2, 4, 8, seed=1)
        kwargs = dict(num_heads=2, input_layout="BNSD", softmax_lse_flag=True,
                      attention_out=torch.zeros(1, 2, 3, 8), softmax_lse=torch.zeros(1, 2, 3, 1))
        kwargs.update(over)
        return (q, k, k), kwargs
    return make


def _fia_v2_out(**over):
    def make():
        q, k = _r(1, 3, 16, dtype=torch.float16), _r(1, 5, 16, seed=1, dtype=torch.float16)
        kwargs = dict(num_query_heads=2, input_layout="BSH", return_softmax_lse=True,
                      attention_out=torch.zeros(1, 3, 16, dtype=torch.float16),
                      softmax_lse=torch.zeros(1, 2, 3, 1, dtype=torch.float32))
        kwargs.update(over)
        return (q, k, k), kwargs
    return make


e = entry("npu_fused_infer_attention_score.out")
e.samples += [Sample("bnsd_lse", _fia_out()),
              Sample("bnsd_reserved_lse", _fia_out(softmax_lse_flag=False,
                                                   softmax_lse=torch.zeros(1)))]
e.errors += [ErrorSample("out_shape", _fia_out(attention_out=torch.zeros(1, 2, 3, 4)),
                         RuntimeError, "attention_out"),
             ErrorSample("layout", _fia_out(input_layout="SBH"), ValueError, "input_layout")]

e = entry("npu_fused_infer_attention_score_v2.out")
e.samples += [Sample("bsh_lse", _fia_v2_out()),
              Sample("bsh_reserved_lse", _fia_v2_out(return_softmax_lse=False,
                                                     softmax_lse=torch.zeros(1)))]
e.errors += [ErrorSample("out_dtype", _fia_v2_out(attention_out=torch.zeros(1, 3, 16)),
                         RuntimeError, "attention_out")]


# -- npu_grouped_matmul.List ------------------------------------------------------------------

def _gmm_list(**over):
    def make():
        x = _r(9, 8)
        ws = [_r(8, 5, seed=1 + i) for i in range(3)]
        kwargs = dict(group_list=[3, 3, 9], split_item=2)
        kwargs.update(over)
        return ([x], ws), kwargs
    return make


def _gmm_list_many_x():
    xs = [_r(2, 3, 8, dtype=torch.float64), _r(1, 2, 8, seed=1, dtype=torch.float64)]
    ws = [_r(8, 4, seed=2, dtype=torch.float64), _r(8, 3, seed=3, dtype=torch.float64)]
    return (xs, ws), dict(bias=[_r(4, seed=4, dtype=torch.float64),
                                _r(3, seed=5, dtype=torch.float64)])


e = entry("npu_grouped_matmul.List")
e.samples += [Sample("one_x_one_output", _gmm_list()),
              Sample("one_x_per_group_outputs", _gmm_list(split_item=0)),
              Sample("many_x_no_group_list", _gmm_list_many_x)]
e.errors += [ErrorSample("decreasing", _gmm_list(group_list=[3, 2, 9]), ValueError,
                         "group_list"),
             ErrorSample("group_list_type", _gmm_list(group_list_type=1), ValueError,
                         "group_list_type"),
             ErrorSample("weight_count", _gmm_list(split_item=0, group_list=[3, 9]),
                         RuntimeError, "weight")]


# -- npu_fusion_attention_v3.out, npu_fusion_attention_grad_v3.out -----------------------------

def _fa_v3_inputs(dtype=torch.float32):
    q, k, v = _r(5, 2, 4, dtype=dtype), _r(7, 1, 4, seed=1, dtype=dtype), _r(7, 1, 4, seed=2,
                                                                             dtype=dtype)
    lengths = dict(actual_seq_qlen=torch.tensor([2, 5]), actual_seq_kvlen=torch.tensor([3, 7]))
    return q, k, v, lengths


def _fa_v3_out(**over):
    def make():
        q, k, v, lengths = _fa_v3_inputs()
        stats = torch.zeros(5, 2, 8)
        kwargs = dict(lengths, scale=0.5, attention_score=torch.zeros(5, 2, 4),
                      softmax_max=stats, softmax_sum=stats.clone(), softmax_out=torch.zeros(0),
                      seed=torch.zeros(1, dtype=torch.int64),
                      offset=torch.zeros(1, dtype=torch.int64))
        kwargs.update(over)
        return (q, k, v, 2, "TND"), kwargs
    return make


def _fa_v3_grad_out(**over):
    def make():
        q, k, v, lengths = _fa_v3_inputs(torch.float64)
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
        attention, smax, ssum, _, seed, offset = torch.ops.npu.npu_fusion_attention_v3(
            q, k, v, 2, "TND", atten_mask=mask, sparse_mode=3, **lengths)
        kwargs = dict(lengths, atten_mask=mask, sparse_mode=3, softmax_max=smax,
                      softmax_sum=ssum, attention_in=attention, seed=seed, offset=offset,
                      dq=torch.zeros_like(q), dk=torch.zeros_like(k), dv=torch.zeros_like(v),
                      dpse=torch.zeros(0, dtype=q.dtype), dsink=torch.zeros(0))
        kwargs.update(over)
        return (q, k, v, _r(5, 2, 4, seed=3, dtype=q.dtype), 2, "TND"), kwargs
    return make


def _fa_v3_bnsd_out():
    # First sample: no values-dependent checks (FakeTensor sees no length values), so the
    # argument fuzz finds eager and fake alike.
    q, k = _r(1, 2, 3, 4), _r(1, 1, 5, 4, seed=1)
    stats = torch.zeros(1, 2, 3, 8)
    return (q, k, k.clone(), 2, "BNSD"), dict(
        actual_seq_qlen=torch.tensor([3]), actual_seq_kvlen=torch.tensor([5]),
        attention_score=torch.zeros(1, 2, 3, 4), softmax_max=stats, softmax_sum=stats.clone(),
        softmax_out=torch.zeros(0), seed=torch.zeros(1, dtype=torch.int64),
        offset=torch.zeros(1, dtype=torch.int64))


def _fa_v3_bnsd_grad_out():
    # float32: the fused-kernel provider of the backward fails on float64 BNSD (reported).
    q, k = _r(1, 2, 3, 4), _r(1, 1, 5, 4, seed=1)
    lengths = dict(actual_seq_qlen=torch.tensor([3]), actual_seq_kvlen=torch.tensor([5]))
    attention, smax, ssum, _, seed, offset = torch.ops.npu.npu_fusion_attention_v3(
        q, k, k, 2, "BNSD", **lengths)
    return (q, k, k.clone(), _r(1, 2, 3, 4, seed=2), 2, "BNSD"), dict(
        lengths, softmax_max=smax, softmax_sum=ssum, attention_in=attention, seed=seed,
        offset=offset, dq=torch.zeros_like(q), dk=torch.zeros_like(k), dv=torch.zeros_like(k),
        dpse=torch.zeros(0, dtype=q.dtype), dsink=torch.zeros(0))


e = entry("npu_fusion_attention_v3.out")
e.samples += [Sample("bnsd_lengths", _fa_v3_bnsd_out), Sample("tnd", _fa_v3_out()),
              Sample("tnd_causal_workspace", _fa_v3_out(
                  atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1),
                  sparse_mode=3, workspace=torch.zeros(8)))]
e.errors += [ErrorSample("out_shape", _fa_v3_out(attention_score=torch.zeros(5, 2, 3)),
                         RuntimeError, "attention_score"),
             ErrorSample("sink", _fa_v3_out(sink=torch.zeros(2)), ValueError, "sink")]

e = entry("npu_fusion_attention_grad_v3.out")
e.samples += [Sample("bnsd_lengths", _fa_v3_bnsd_grad_out),
              Sample("tnd_causal", _fa_v3_grad_out())]
e.errors += [ErrorSample("dk_dtype", _fa_v3_grad_out(dk=torch.zeros(7, 1, 4)), RuntimeError,
                         "dk"),
             ErrorSample("sink", _fa_v3_grad_out(sink=torch.zeros(2, dtype=torch.float64)),
                         ValueError, "sink")]
