"""npu_ring_attention_update against a float64 golden written from the doc formula.

Spec (seed 004, aclnnRingAttentionUpdateV2.md)::

    m   = max(pm, cm)
    sum = ps * exp(pm - m) + cs * exp(cm - m)
    out = prev * exp(pm - m) * ps / sum + cur * exp(cm - m) * cs / sum

Layouts: SBH attention [S, B, N*D] with softmax [B, N, S, 8]; TND attention [T, N, D] with softmax
[T, N, 8], token-major for input_softmax_layout="TND" and, for ""/"SBH", head-major within each
sequence (ring_attention_update_tnd.h: row of (t, n) = start_b * N + n * len_b + (t - start_b)).
The golden reads the softmax values element by element with that address rule (Python loops), so
it shares no indexing code with the op.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
OP = torch.ops.npu.npu_ring_attention_update


def merge64(prev, cur, pm, ps, cm, cs):
    """The doc formula on float64 scalars/tensors (pm..cs broadcast against prev/cur)."""
    m = torch.maximum(pm, cm)
    total = ps * torch.exp(pm - m) + cs * torch.exp(cm - m)
    out = prev * torch.exp(pm - m) * ps / total + cur * torch.exp(cm - m) * cs / total
    return out, m, total


def stat(*shape, gen, lo=0.1, spread=2.0):
    return (torch.rand(*shape, 1, generator=gen) * spread + lo).repeat(*([1] * len(shape)), 8)


def sbh_inputs(s, b, n, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    prev = torch.randn(s, b, n * d, generator=g).to(dtype)
    cur = torch.randn(s, b, n * d, generator=g).to(dtype)
    stats = [stat(b, n, s, gen=g, spread=4.0 if k % 2 == 0 else 2.0) for k in range(4)]
    return prev, cur, stats


def sbh_golden(prev, cur, stats):
    s, b, h = prev.shape
    n = stats[0].shape[1]
    d = h // n
    out = torch.empty(s, b, h, dtype=torch.float64)
    pm, ps, cm, cs = (x.double() for x in stats)
    for bi in range(b):
        for ni in range(n):
            cols = slice(ni * d, (ni + 1) * d)
            o, _, _ = merge64(prev[:, bi, cols].double(), cur[:, bi, cols].double(),
                              pm[bi, ni, :, 0:1], ps[bi, ni, :, 0:1], cm[bi, ni, :, 0:1],
                              cs[bi, ni, :, 0:1])
            out[:, bi, cols] = o
    _, m, total = merge64(0, 0, pm, ps, cm, cs)
    return out, m, total


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("s,b,n,d", [(4, 2, 2, 16), (3, 1, 3, 8), (1, 3, 1, 32)])
def test_sbh_matches_doc_formula(s, b, n, d, dtype):
    prev, cur, stats = sbh_inputs(s, b, n, d, dtype, seed=s * b + n)
    before = [t.clone() for t in (prev, cur, *stats)]
    out, m, total = na.npu_ring_attention_update(prev, stats[0], stats[1], cur, stats[2], stats[3])
    want, want_m, want_sum = sbh_golden(prev, cur, stats)
    assert out.dtype == dtype and out.shape == prev.shape
    assert m.dtype == total.dtype == torch.float32 and m.shape == stats[0].shape
    assert_close_to_golden(out, want, dtype=dtype)
    assert_close_to_golden(m, want_m, dtype=torch.float32)
    assert_close_to_golden(total, want_sum, dtype=torch.float32)
    for a, c in zip((prev, cur, *stats), before):
        assert torch.equal(a, c)


def tnd_inputs(lens, n, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = sum(lens)
    prev = torch.randn(t, n, d, generator=g).to(dtype)
    cur = torch.randn(t, n, d, generator=g).to(dtype)
    stats = [stat(t, n, gen=g) for _ in range(4)]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int64)
    return prev, cur, stats, cu


def tnd_golden(prev, cur, stats, lens, head_major):
    t, n, d = prev.shape
    flat = [x.double().reshape(t * n, 8) for x in stats]
    out = torch.empty(t, n, d, dtype=torch.float64)
    new_m = torch.empty(t * n, 8, dtype=torch.float64)
    new_s = torch.empty(t * n, 8, dtype=torch.float64)
    start = 0
    for length in lens:
        for k in range(length):
            tok = start + k
            for h in range(n):
                row = start * n + h * length + k if head_major else tok * n + h
                pm, ps, cm, cs = (x[row] for x in flat)
                o, _, _ = merge64(prev[tok, h].double(), cur[tok, h].double(), pm[0], ps[0],
                                  cm[0], cs[0])
                out[tok, h] = o
                _, new_m[row], new_s[row] = merge64(0, 0, pm, ps, cm, cs)
        start += length
    return out, new_m.reshape(t, n, 8), new_s.reshape(t, n, 8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("softmax_layout", ["", "SBH", "TND"])
@pytest.mark.parametrize("lens,n,d", [([2, 3], 2, 64), ([1, 0, 4, 2], 3, 128)])
def test_tnd_matches_doc_formula(lens, n, d, softmax_layout, dtype):
    prev, cur, stats, cu = tnd_inputs(lens, n, d, dtype, seed=len(lens))
    out, m, total = na.npu_ring_attention_update(
        prev, stats[0], stats[1], cur, stats[2], stats[3], actual_seq_qlen=cu,
        input_layout="TND", input_softmax_layout=softmax_layout)
    want, want_m, want_sum = tnd_golden(prev, cur, stats, lens, softmax_layout != "TND")
    assert out.dtype == dtype and m.shape == stats[0].shape
    assert_close_to_golden(out, want, dtype=dtype)
    assert_close_to_golden(m, want_m, dtype=torch.float32)
    assert_close_to_golden(total, want_sum, dtype=torch.float32)


def test_float64_and_non_contiguous():
    prev, cur, stats = sbh_inputs(3, 2, 2, 8, torch.float64)
    wide = torch.randn(3, 2, 32, dtype=torch.float64)
    cur = wide[..., ::2]
    stats = [x.double() for x in stats]
    stats[1] = stats[1].transpose(0, 1).contiguous().transpose(0, 1)   # strided view
    out, m, total = na.npu_ring_attention_update(prev, stats[0], stats[1], cur, stats[2], stats[3])
    want, want_m, want_sum = sbh_golden(prev, cur, stats)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(total, want_sum, rtol=1e-12, atol=1e-12)


def test_torch_ops_and_opcheck():
    prev, cur, stats, cu = tnd_inputs([2, 3], 2, 64, torch.float16)
    kwargs = dict(actual_seq_qlen=cu, input_layout="TND")
    a = OP(prev, stats[0], stats[1], cur, stats[2], stats[3], **kwargs)
    b = na.npu_ring_attention_update(prev, stats[0], stats[1], cur, stats[2], stats[3], **kwargs)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    torch.library.opcheck(OP.default, (prev, stats[0], stats[1], cur, stats[2], stats[3]),
                          kwargs)


def _sbh(**over):
    g = torch.Generator().manual_seed(1)
    args = dict(prev=torch.randn(3, 2, 32), pm=stat(2, 2, 3, gen=g), ps=stat(2, 2, 3, gen=g),
                cur=torch.randn(3, 2, 32), cm=stat(2, 2, 3, gen=g), cs=stat(2, 2, 3, gen=g))
    kwargs = over.pop("kwargs", {})
    args.update(over)
    return (args["prev"], args["pm"], args["ps"], args["cur"], args["cm"], args["cs"]), kwargs


def _tnd(lens=(2, 3), n=2, d=64, **kwargs):
    prev, cur, stats, cu = tnd_inputs(list(lens), n, d, torch.float32)
    kw = {"actual_seq_qlen": cu, "input_layout": "TND", **kwargs}
    return (prev, stats[0], stats[1], cur, stats[2], stats[3]), kw


@pytest.mark.parametrize("make,error,match", [
    (lambda: _sbh(kwargs={"input_layout": "BNSD"}), ValueError, "input_layout one of"),
    (lambda: _sbh(kwargs={"input_softmax_layout": "BSH"}), ValueError,
     "input_softmax_layout one of"),
    (lambda: _sbh(cur=torch.randn(3, 2, 16)), RuntimeError, "cur_attn_out the shape"),
    (lambda: _sbh(cur=torch.randn(3, 2, 32).half()), TypeError, "cur_attn_out the same dtype"),
    (lambda: _sbh(prev=torch.randn(3, 64), cur=torch.randn(3, 64)), ValueError, "a 3-D tensor"),
    (lambda: _sbh(ps=torch.rand(2, 2, 3, 8).half()), TypeError, "prev_softmax_sum dtype in"),
    (lambda: _sbh(cs=torch.rand(2, 2, 4, 8)), RuntimeError, "cur_softmax_sum the shape"),
    (lambda: _sbh(pm=torch.rand(2, 2, 3, 4), ps=torch.rand(2, 2, 3, 4), cm=torch.rand(2, 2, 3, 4),
                  cs=torch.rand(2, 2, 3, 4)), ValueError, "a last dim of 8"),
    (lambda: _sbh(pm=torch.rand(2, 2, 4, 8), ps=torch.rand(2, 2, 4, 8), cm=torch.rand(2, 2, 4, 8),
                  cs=torch.rand(2, 2, 4, 8)), RuntimeError, "with B=2 and S=3"),
    (lambda: _sbh(pm=torch.rand(2, 3, 3, 8), ps=torch.rand(2, 3, 3, 8), cm=torch.rand(2, 3, 3, 8),
                  cs=torch.rand(2, 3, 3, 8)), RuntimeError, "divisible by the head count"),
    (lambda: _tnd(actual_seq_qlen=None), ValueError, "actual_seq_qlen a tensor"),
    (lambda: _tnd(actual_seq_qlen=torch.tensor([0, 2, 5], dtype=torch.int32)), TypeError,
     "actual_seq_qlen dtype in"),
    (lambda: _tnd(d=96), ValueError, "a multiple of 64"),
    (lambda: _tnd(d=832), ValueError, "at most 768"),
])
def test_bad_inputs_raise_identically_in_eager_and_fake(make, error, match):
    args, kwargs = make()
    with pytest.raises(error, match="npu_ring_attention_update: expected .*" + match):
        OP(*args, **kwargs)
    with FakeTensorMode() as mode:
        fargs = [mode.from_tensor(a) for a in args]
        fkw = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
               for k, v in kwargs.items()}
        with pytest.raises(error, match="npu_ring_attention_update: expected .*" + match):
            OP(*fargs, **fkw)


@pytest.mark.parametrize("cu", [[1, 2, 5], [0, 3, 2, 5], [0, 2, 4], [0]])
def test_bad_cumulative_lengths_in_the_head_major_order(cu):
    args, kwargs = _tnd(actual_seq_qlen=torch.tensor(cu))
    with pytest.raises(ValueError, match="npu_ring_attention_update: expected actual_seq_qlen "
                       "cumulative query lengths"):
        OP(*args, **kwargs)
    # the token-major order never reads them: the merge is per token
    OP(*args, **{**kwargs, "input_softmax_layout": "TND"})


def test_fake_output_metadata():
    args, kwargs = _tnd()
    with FakeTensorMode() as mode:
        fargs = [mode.from_tensor(a) for a in args]
        fkw = {**kwargs, "actual_seq_qlen": mode.from_tensor(kwargs["actual_seq_qlen"])}
        out = OP(*fargs, **fkw)
    eager = OP(*args, **kwargs)
    for f, e in zip(out, eager):
        assert f.shape == e.shape and f.dtype == e.dtype and f.stride() == e.stride()


def test_strict_products():
    args, kwargs = _sbh()
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            OP(*args, **kwargs)
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(RuntimeError, match="expected a product"):
            OP(*args, **kwargs)
    doubled = [a.double() for a in args]
    OP(*doubled)
    with na.strict("A3"), pytest.raises(TypeError, match="prev_attn_out dtype in"):
        OP(*doubled)


def test_no_backward():
    args, _ = _sbh()
    args[0].requires_grad_()
    with pytest.raises(RuntimeError, match="expected inputs that do not require grad"):
        OP(*args)


def test_compile_fullgraph():
    args, kwargs = _tnd(input_softmax_layout="TND")
    fn = torch.compile(lambda *a: OP(*a, **kwargs), fullgraph=True, backend="eager")
    for got, want in zip(fn(*args), OP(*args, **kwargs)):
        torch.testing.assert_close(got, want)
