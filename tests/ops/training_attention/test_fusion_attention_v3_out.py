"""npu_fusion_attention_v3.out / npu_fusion_attention_grad_v3.out: the functional results written
into the given tensors (op-plugin's schemas), checked against the float64 golden of this
directory per TND batch and against autograd of that golden; the kernel's rules for the .out
forms (lengths required, no sink, a workspace only with TND) and exact output metadata."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from fa_golden import attention, visible

NPU = torch.ops.npu
TRIU = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
QLEN, KVLEN = [2, 5], [3, 7]              # cumulative: batches of (2, 3) and (3, 4) tokens
N, NKV, D, SCALE = 2, 1, 4, 0.4


def _rand(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _inputs(dtype=torch.float64):
    return (_rand(QLEN[-1], N, D, dtype=dtype), _rand(KVLEN[-1], NKV, D, dtype=dtype, seed=1),
            _rand(KVLEN[-1], NKV, D, dtype=dtype, seed=2))


def _lengths():
    return dict(actual_seq_qlen=torch.tensor(QLEN), actual_seq_kvlen=torch.tensor(KVLEN))


def _golden(q, k, v, sparse_mode):
    """float64, batch by batch: softmax(scale * q k^T) v on the visible positions."""
    outs, q0, k0 = [], 0, 0
    for q1, k1 in zip(QLEN, KVLEN):
        qb = q[q0:q1].double().permute(1, 0, 2)[None]
        kb, vb = (t[k0:k1].double().permute(1, 0, 2)[None] for t in (k, v))
        vis = visible(sparse_mode, q1 - q0, k1 - k0) if sparse_mode else None
        outs.append(attention(qb, kb, vb, SCALE, vis=vis)[0][0].permute(1, 0, 2))
        q0, k0 = q1, k1
    return torch.cat(outs)


def _empty_outputs(q, k, v, **kwargs):
    """Tensors shaped like the functional results (what the .out overload requires)."""
    ref = NPU.npu_fusion_attention_v3(q, k, v, N, "TND", **kwargs)
    names = ("attention_score", "softmax_max", "softmax_sum", "softmax_out", "seed", "offset")
    return {n: torch.full_like(t, 7) for n, t in zip(names, ref)}


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_forward_out_writes_the_golden_into_the_given_tensors(sparse_mode):
    q, k, v = _inputs()
    mask = dict(atten_mask=TRIU, sparse_mode=3) if sparse_mode else {}
    outs = _empty_outputs(q, k, v, scale=SCALE, **mask, **_lengths())
    before = [t.clone() for t in (q, k, v)]
    got = NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", scale=SCALE, **mask, **_lengths(),
                                          **outs)
    assert len(got) == 6 and all(g is t for g, t in zip(got, outs.values()))
    torch.testing.assert_close(outs["attention_score"], _golden(q, k, v, sparse_mode),
                               rtol=1e-10, atol=1e-10)
    assert int(outs["seed"]) == 0 and int(outs["offset"]) == 0     # keep_prob 1 draws nothing
    assert all(torch.equal(b, t) for b, t in zip(before, (q, k, v)))


def test_forward_out_float16_and_a_workspace():
    q, k, v = _inputs(torch.float16)
    outs = _empty_outputs(q, k, v, scale=SCALE, **_lengths())
    NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", scale=SCALE, **_lengths(),
                                    workspace=torch.zeros(16), **outs)
    assert outs["attention_score"].dtype == torch.float16
    torch.testing.assert_close(outs["attention_score"].double(), _golden(q, k, v, 0),
                               rtol=2e-3, atol=2e-3)


def test_forward_out_dropout_writes_the_seed_that_reproduces_it():
    q, k, v = _inputs(torch.float32)
    outs = _empty_outputs(q, k, v, keep_prob=0.5, **_lengths())
    NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", keep_prob=0.5, **_lengths(), **outs)
    seed, offset = int(outs["seed"]), int(outs["offset"])
    assert (seed, offset) != (0, 0)          # a drawn mask (seed 0 only after manual_seed(0))
    again = na.npu_fusion_attention(q, k, v, N, "TND", keep_prob=0.5, actual_seq_qlen=QLEN,
                                    actual_seq_kvlen=KVLEN, seed=seed, offset=offset)
    assert torch.equal(outs["attention_score"], again[0])


def test_grad_out_matches_autograd_of_the_golden():
    q, k, v = (t.requires_grad_() for t in _inputs())
    want = _golden(q, k, v, 3)
    dy = _rand(*want.shape, seed=5)
    dq_want, dk_want, dv_want = torch.autograd.grad(want, (q, k, v), dy)
    q, k, v = (t.detach() for t in (q, k, v))
    fwd = NPU.npu_fusion_attention_v3(q, k, v, N, "TND", atten_mask=TRIU, sparse_mode=3,
                                      scale=SCALE, **_lengths())
    outs = dict(dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v),
                dpse=torch.empty(0, dtype=q.dtype), dsink=torch.empty(0))
    got = NPU.npu_fusion_attention_grad_v3.out(
        q, k, v, dy, N, "TND", atten_mask=TRIU, softmax_max=fwd[1], softmax_sum=fwd[2],
        attention_in=fwd[0], scale_value=SCALE, sparse_mode=3, seed=fwd[4], offset=fwd[5],
        **_lengths(), **outs)
    assert all(g is t for g, t in zip(got, outs.values()))
    for name, w in (("dq", dq_want), ("dk", dk_want), ("dv", dv_want)):
        torch.testing.assert_close(outs[name], w, rtol=1e-9, atol=1e-9)


def _forward_call(**over):
    q, k, v = _inputs(torch.float32)
    kwargs = dict(_lengths())
    kwargs.update(_empty_outputs(q, k, v, **_lengths()))
    kwargs.update(over)
    return lambda: NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", **kwargs)


@pytest.mark.parametrize("over,error,match", [
    ({"actual_seq_qlen": None}, ValueError, "expected actual_seq_qlen a list of cumulative"),
    ({"sink": torch.zeros(N)}, ValueError, "expected sink None \\(the .out overload"),
    ({"attention_score": torch.empty(5, 2, 5)}, RuntimeError,
     "expected attention_score shape \\(5, 2, 4\\), dtype torch.float32"),
    ({"softmax_max": torch.empty(5, 2, 8, dtype=torch.float16)}, RuntimeError,
     "expected softmax_max shape \\(5, 2, 8\\), dtype torch.float32"),
    ({"seed": torch.empty(1, dtype=torch.int32)}, RuntimeError, "expected seed shape \\(1,\\)"),
    ({"keep_prob": 1.5}, ValueError, "expected keep_prob in"),
])
def test_forward_out_bad_inputs_write_nothing(over, error, match):
    call = _forward_call(**over)
    with pytest.raises(error, match="npu_fusion_attention_v3: " + match):
        call()


def test_other_layouts_need_lengths_and_no_workspace():
    q, k, v = (_rand(1, 3, N * D, dtype=torch.float32, seed=s) for s in range(3))
    outs = dict(attention_score=torch.empty(1, 3, 8), softmax_max=torch.empty(1, 2, 3, 8),
                softmax_sum=torch.empty(1, 2, 3, 8), softmax_out=torch.empty(0),
                seed=torch.empty(1, dtype=torch.int64), offset=torch.empty(1, dtype=torch.int64))
    lengths = dict(actual_seq_qlen=torch.tensor([3]), actual_seq_kvlen=torch.tensor([3]))
    with pytest.raises(ValueError, match="npu_fusion_attention_v3: expected input_layout "
                       "'TND' when a workspace"):
        NPU.npu_fusion_attention_v3.out(q, k, v, N, "BSH", **lengths, workspace=torch.zeros(4),
                                        **outs)
    with pytest.raises(ValueError, match="npu_fusion_attention_v3: expected actual_seq_kvlen "
                       "a tensor of cumulative lengths \\(the .out overload"):
        NPU.npu_fusion_attention_v3.out(q, k, v, N, "BSH", actual_seq_qlen=torch.tensor([3]),
                                        actual_seq_kvlen=torch.empty(0, dtype=torch.int64),
                                        **outs)
    NPU.npu_fusion_attention_v3.out(q, k, v, N, "BSH", **lengths, **outs)
    want = NPU.npu_fusion_attention_v3(q, k, v, N, "BSH")[0]
    torch.testing.assert_close(outs["attention_score"], want, rtol=0, atol=0)


def test_grad_out_bad_inputs():
    q, k, v = _inputs(torch.float32)
    fwd = NPU.npu_fusion_attention_v3(q, k, v, N, "TND", **_lengths())
    stats = dict(softmax_max=fwd[1], softmax_sum=fwd[2], attention_in=fwd[0])
    outs = dict(dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty(7, 1, 5),
                dpse=torch.empty(0), dsink=torch.empty(0))
    with pytest.raises(RuntimeError, match="npu_fusion_attention_grad_v3: expected dv shape "
                       "\\(7, 1, 4\\)"):
        NPU.npu_fusion_attention_grad_v3.out(q, k, v, q, N, "TND", **stats, **_lengths(),
                                             **outs)
    outs["dv"] = torch.empty_like(v)
    with pytest.raises(ValueError, match="npu_fusion_attention_grad_v3: expected sink None"):
        NPU.npu_fusion_attention_grad_v3.out(q, k, v, q, N, "TND", **stats, **_lengths(),
                                             sink=torch.zeros(N), **outs)


def test_fake_compile_and_strict():
    q, k, v = _inputs(torch.float32)
    outs = _empty_outputs(q, k, v, **_lengths())
    want = NPU.npu_fusion_attention_v3(q, k, v, N, "TND", **_lengths())[0]
    mode = FakeTensorMode()
    with mode:
        fake = NPU.npu_fusion_attention_v3.out(
            *(mode.from_tensor(t) for t in (q, k, v)), N, "TND",
            **{n: mode.from_tensor(t) for n, t in {**_lengths(), **outs}.items()})
    assert fake[0].shape == want.shape

    def fn(q, k, v, o):
        NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", **_lengths(),
                                        **{**outs, "attention_score": o})
        return o

    torch._dynamo.reset()
    o = torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k, v, torch.zeros_like(want))
    assert torch.equal(o, want)
    with na.strict("950"), pytest.raises(RuntimeError, match="npu_fusion_attention_v3"):
        _forward_call()()
    with pytest.raises(RuntimeError, match="requires_grad|no backward|do not require grad"):
        _forward_call(attention_score=torch.zeros(5, 2, 4, requires_grad=True))()


# -- the graph-capture helpers -----------------------------------------------------------------

@pytest.mark.parametrize("layout,qshape,kshape,vshape,out_shape,stats_shape", [
    ("BSH", (2, 3, 16), (2, 5, 8), (2, 5, 12), (2, 3, 24), (2, 4, 3, 8)),    # D 4, Dv 6, GQA
    ("SBH", (3, 2, 16), (5, 2, 8), (5, 2, 8), (3, 2, 16), (2, 4, 3, 8)),
    ("BNSD", (2, 4, 3, 4), (2, 2, 5, 4), (2, 2, 5, 6), (2, 4, 3, 6), (2, 4, 3, 8)),
    ("BSND", (2, 3, 4, 4), (2, 5, 2, 4), (2, 5, 2, 4), (2, 3, 4, 4), (2, 4, 3, 8)),
    ("TND", (5, 4, 4), (7, 2, 4), (7, 2, 4), (5, 4, 4), (5, 4, 8)),
])
def test_infer_output_shapes(layout, qshape, kshape, vshape, out_shape, stats_shape):
    """op-plugin's infer_fa_v3_*_shape: value's head size, [B, N, S, 8] / [T, N, 8] stats."""
    q, k, v = torch.randn(qshape), torch.randn(kshape), torch.randn(vshape)
    out, smax, ssum = NPU._npu_fusion_attention_v3_infer_output(q, k, v, 4, layout.lower())
    assert out.shape == out_shape and out.dtype == q.dtype
    assert smax.shape == ssum.shape == stats_shape and smax.dtype == torch.float32


def test_graph_capture_flow_with_helpers_and_reserved_outputs():
    """What ACL-graph code does: allocate with the helpers, softmax_out like softmax_max."""
    q, k, v = _inputs(torch.float32)
    kw = dict(atten_mask=TRIU, sparse_mode=3, scale=SCALE, **_lengths())
    ws = NPU._npu_fusion_attention_v3_get_max_workspace(q, k, v, N, "TND", **kw)
    assert ws.dim() == 1 and ws.dtype == torch.uint8
    attention, smax, ssum = NPU._npu_fusion_attention_v3_infer_output(q, k, v, N, "TND")
    seed, offset = torch.empty(1, dtype=torch.int64), torch.empty(1, dtype=torch.int64)
    softmax_out = torch.empty_like(smax)
    NPU.npu_fusion_attention_v3.out(q, k, v, N, "TND", **kw, workspace=ws,
                                    attention_score=attention, softmax_max=smax,
                                    softmax_sum=ssum, softmax_out=softmax_out, seed=seed,
                                    offset=offset)
    torch.testing.assert_close(attention.double(), _golden(q, k, v, 3), rtol=2e-5, atol=2e-5)
    dy = _rand(*attention.shape, dtype=torch.float32, seed=9)
    grads = NPU._npu_fusion_attention_grad_v3_infer_output(q, k, v)
    assert [tuple(t.shape) for t in grads] == [(5, 2, 4), (7, 1, 4), (7, 1, 4), (0,), (0,)]
    assert grads[4].dtype == torch.float32
    gkw = dict(atten_mask=TRIU, sparse_mode=3, scale_value=SCALE, softmax_max=smax,
               softmax_sum=ssum, attention_in=attention, seed=seed, offset=offset, **_lengths())
    gws = NPU._npu_fusion_attention_grad_v3_get_max_workspace(q, k, v, dy, N, "TND", **gkw)
    NPU.npu_fusion_attention_grad_v3.out(q, k, v, dy, N, "TND", **gkw, workspace=gws,
                                         dq=grads[0], dk=grads[1], dv=grads[2],
                                         dpse=torch.empty(3), dsink=grads[4])
    want = NPU.npu_fusion_attention_grad_v3(q, k, v, dy, N, "TND", **gkw)
    for got, w in zip(grads[:3], want[:3]):
        torch.testing.assert_close(got, w, rtol=0, atol=0)


def test_workspace_queries_take_tnd_with_lengths_only():
    q, k, v = (_rand(1, 3, N * D, dtype=torch.float32, seed=s) for s in range(3))
    with pytest.raises(ValueError, match="npu_fusion_attention_v3: expected input_layout 'TND'"):
        NPU._npu_fusion_attention_v3_get_max_workspace(q, k, v, N, "BSH")
    o = NPU.npu_fusion_attention_v3(q, k, v, N, "BSH")
    with pytest.raises(ValueError, match="npu_fusion_attention_grad_v3: expected input_layout "
                       "'TND' \\(a workspace"):
        NPU._npu_fusion_attention_grad_v3_get_max_workspace(
            q, k, v, q, N, "BSH", softmax_max=o[1], softmax_sum=o[2], attention_in=o[0])
    with pytest.raises(ValueError, match="npu_fusion_attention_v3: expected input_layout one of"):
        NPU._npu_fusion_attention_v3_infer_output(q, k, v, N, "NTD")
