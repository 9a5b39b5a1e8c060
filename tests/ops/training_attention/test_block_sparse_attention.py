"""npu_block_sparse_attention (+ backward) against a float64 golden of the documented formula."""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere
from npu_anywhere import strict
from npu_anywhere.ops.training_attention.block_sparse_attention import FAST_PROVIDER

F16, BF16, F64 = torch.float16, torch.bfloat16, torch.float64


def golden(q_seqs, k_seqs, v_seqs, masks, bx, by, scale):
    """Per batch ``[N1, len, D]`` float64 pieces -> (out [N1, len, D], lse [N1, len]) lists.

    Written from the doc formula: element (i, j) of head n is kept iff the mask's block
    (i // bx, j // by) is nonzero; a row that keeps nothing is 0 with lse -inf."""
    outs, lses = [], []
    for q, k, v, m in zip(q_seqs, k_seqs, v_seqs, masks):
        n1, n2 = q.shape[0], k.shape[0]
        rows_block = torch.arange(q.shape[1]) // bx
        cols_block = torch.arange(k.shape[1]) // by
        out = torch.zeros(q.shape, dtype=F64)
        lse = torch.full(q.shape[:2], float("-inf"), dtype=F64)
        for n in range(n1):
            kv = n // (n1 // n2)
            keep = m[n][rows_block[:, None], cols_block[None, :]] != 0      # [Sq, Skv]
            s = scale * (q[n].double() @ k[kv].double().T)
            s = torch.where(keep, s, torch.tensor(float("-inf"), dtype=F64))
            seen = keep.any(1)
            lse[n, seen] = torch.logsumexp(s[seen], 1)
            out[n, seen] = torch.softmax(s[seen], 1) @ v[kv].double()
        outs.append(out)
        lses.append(lse)
    return outs, lses


def _bnsd(b, n1, n2, sq, skv, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    return mk(b, n1, sq, d), mk(b, n2, skv, d), mk(b, n2, skv, d)


def _mask(b, n, sq, skv, bx, by, seed=1, density=0.6):
    g = torch.Generator().manual_seed(seed)
    shape = (b, n, math.ceil(sq / bx), math.ceil(skv / by))
    return (torch.rand(shape, generator=g) < density).to(torch.int8)


def _bnsd_call(q, k, v, mask, block, **kw):
    return npu_anywhere.npu_block_sparse_attention(
        q, k, v, mask, block, q_input_layout="BNSD", kv_input_layout="BNSD",
        num_key_value_heads=k.shape[1], **kw)


TOL = {F16: 3e-3, BF16: 2.5e-2, F64: 1e-10}


@pytest.mark.parametrize("dtype,precise,n1,n2", [
    (F16, 0, 4, 2), (F16, 1, 2, 2), (BF16, 0, 4, 1)])
def test_bnsd_against_golden(dtype, precise, n1, n2):
    b, sq, skv, d, bx, by, scale = 2, 45, 300, 64, 16, 128, 0.125     # odd sizes, 3 kv blocks
    q, k, v = _bnsd(b, n1, n2, sq, skv, d, dtype)
    mask = _mask(b, n1, sq, skv, bx, by)
    mask[0, 0, 1] = 0                                                   # a row block sees nothing
    out, lse = _bnsd_call(q, k, v, mask, [bx, by], scale_value=scale, inner_precise=precise,
                          softmax_lse_flag=1)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (b, n1, sq, 1) and lse.dtype == torch.float32
    want, want_lse = golden(list(q), list(k), list(v), list(mask), bx, by, scale)
    tol = TOL[dtype] * (2 if precise else 1)
    torch.testing.assert_close(out.double(), torch.stack(want), atol=tol, rtol=tol)
    torch.testing.assert_close(lse[..., 0].double(), torch.stack(want_lse), atol=1e-3, rtol=1e-4)
    assert torch.all(out[0, 0, 16:32] == 0) and torch.all(lse[0, 0, 16:32] == float("-inf"))


def test_tnd_multi_batch_gqa_and_inputs_untouched():
    n1, n2, d, bx, by, scale = 4, 2, 64, 32, 128, 0.1
    q_lens, kv_lens = [70, 3, 130], [150, 260, 1]
    g = torch.Generator().manual_seed(3)
    q = torch.randn(sum(q_lens), n1, d, generator=g).half()
    k = torch.randn(sum(kv_lens), n2, d, generator=g).half()
    v = torch.randn(sum(kv_lens), n2, d, generator=g).half()
    mask = _mask(3, n1, max(q_lens), max(kv_lens), bx, by, seed=4)
    before = [t.clone() for t in (q, k, v, mask)]
    out, lse = npu_anywhere.npu_block_sparse_attention(
        q, k, v, mask, [bx, by], num_key_value_heads=n2, scale_value=scale, inner_precise=0,
        actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens, softmax_lse_flag=1)
    assert out.shape == q.shape and lse.shape == (sum(q_lens), n1, 1)
    for t, t0 in zip((q, k, v, mask), before):
        assert torch.equal(t, t0)
    qc = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    kc = [0, *torch.tensor(kv_lens).cumsum(0).tolist()]
    pieces = lambda x, c: [x[c[i]:c[i + 1]].transpose(0, 1) for i in range(3)]  # noqa: E731
    want, want_lse = golden(pieces(q, qc), pieces(k, kc), pieces(v, kc), list(mask), bx, by, scale)
    torch.testing.assert_close(out.double(), torch.cat([w.transpose(0, 1) for w in want]),
                               atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(lse[..., 0].double(), torch.cat([w.t() for w in want_lse]),
                               atol=1e-3, rtol=1e-4)


def test_bnsd_actual_lengths_and_noncontiguous():
    b, n, sq, skv, d, bx, by = 2, 2, 40, 200, 64, 8, 128
    g = torch.Generator().manual_seed(5)
    # BSND storage viewed as BNSD: a non-contiguous query / key / value
    q = torch.randn(b, sq, n, d, generator=g).half().transpose(1, 2)
    k = torch.randn(b, skv, n, d, generator=g).half().transpose(1, 2)
    v = torch.randn(b, skv, n, d, generator=g).half().transpose(1, 2)
    lens, kv_lens = [40, 17], [200, 129]
    mask = _mask(b, n, max(lens), max(kv_lens), bx, by, seed=6, density=0.8)
    out, lse = _bnsd_call(q, k, v, mask, [bx, by], scale_value=0.2, inner_precise=0,
                          actual_seq_lengths=lens, actual_seq_lengths_kv=kv_lens)
    want, want_lse = golden([q[i, :, :lens[i]] for i in range(b)],
                            [k[i, :, :kv_lens[i]] for i in range(b)],
                            [v[i, :, :kv_lens[i]] for i in range(b)], list(mask), bx, by, 0.2)
    for i in range(b):
        torch.testing.assert_close(out[i, :, :lens[i]].double(), want[i], atol=3e-3, rtol=3e-3)
    assert torch.all(out[1, :, 17:] == 0) and torch.all(lse[1, :, 17:] == float("-inf"))


def test_default_scale_is_uniform_and_mask_dtypes_agree():
    q, k, v = _bnsd(1, 2, 2, 8, 130, 64, F16)
    mask = torch.ones(1, 2, 1, 2, dtype=torch.int8)
    out, _ = _bnsd_call(q, k, v, mask, [128, 128])          # scale_value 0.0: mean of values
    torch.testing.assert_close(out.double(), v.double().mean(2, keepdim=True).expand_as(out),
                               atol=2e-3, rtol=2e-3)
    sparse = _mask(1, 2, 8, 130, 4, 128, seed=9)
    ref = _bnsd_call(q, k, v, sparse, [4, 128], scale_value=0.3)[0]
    for dt in (torch.bool, torch.uint8, torch.int32):
        assert torch.equal(_bnsd_call(q, k, v, sparse.to(dt), [4, 128], scale_value=0.3)[0], ref)


def _golden_grads(q, k, v, mask, bx, by, scale, dy):
    """Autograd of a dense float64 masked-softmax formula (independent of the op's backward)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(g, 1).transpose(-1, -2) * scale
    sq, skv = q.shape[2], k.shape[2]
    keep = mask.bool()[:, :, torch.arange(sq) // bx][:, :, :, torch.arange(skv) // by]
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
    (p @ v.repeat_interleave(g, 1)).backward(dy.double())
    return q.grad, k.grad, v.grad


def test_backward_op_against_golden_gradients():
    b, n1, n2, sq, skv, d, bx, by, scale = 1, 4, 2, 24, 140, 128, 8, 128, 0.09
    q, k, v = _bnsd(b, n1, n2, sq, skv, d, F16, seed=11)
    mask = _mask(b, n1, sq, skv, bx, by, seed=12)
    mask[0, 1, 0] = 0
    out, lse = _bnsd_call(q, k, v, mask, [bx, by], scale_value=scale, inner_precise=0,
                          softmax_lse_flag=1)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(13)).half()
    got = npu_anywhere.npu_block_sparse_attention_backward(
        dy, q, k, v, out, lse, mask, [bx, by], None, None, "BNSD", "BNSD", n2, scale)
    want = _golden_grads(q, k, v, mask, bx, by, scale, dy)
    for name, g_, w, t in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
        assert g_.shape == t.shape and g_.dtype == F16, name
        torch.testing.assert_close(g_.double(), w, atol=1e-2, rtol=1e-2, msg=name)


@pytest.mark.parametrize("layout", ["BNSD", "TND"])
def test_gradcheck_float64(layout):
    n1, n2, d, bx, by = 2, 1, 64, 4, 128
    g = torch.Generator().manual_seed(21)
    if layout == "BNSD":
        q = torch.randn(1, n1, 9, d, generator=g, dtype=F64)
        k = torch.randn(1, n2, 130, d, generator=g, dtype=F64)
        kw = {}
        mask = _mask(1, n1, 9, 130, bx, by, seed=22, density=0.7)
    else:
        q = torch.randn(7, n1, d, generator=g, dtype=F64)
        k = torch.randn(133, n2, d, generator=g, dtype=F64)
        kw = {"actual_seq_lengths": [5, 2], "actual_seq_lengths_kv": [130, 3]}
        mask = _mask(2, n1, 5, 130, bx, by, seed=22, density=0.7)
    v = torch.randn(k.shape, generator=g, dtype=F64)
    mask.view(-1)[0] = 1

    def f(q, k, v):
        return npu_anywhere.npu_block_sparse_attention(
            q, k, v, mask, [bx, by], q_input_layout=layout, kv_input_layout=layout,
            num_key_value_heads=n2, scale_value=0.2, inner_precise=0, **kw)[0]

    inputs = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


def _bad(**over):
    q, k, v = _bnsd(1, 2, 2, 8, 130, 64, F16)
    a = dict(query=q, key=k, value=v, block_sparse_mask=torch.ones(1, 2, 1, 2, dtype=torch.int8),
             block_shape=[128, 128], q_input_layout="BNSD", kv_input_layout="BNSD",
             num_key_value_heads=2)
    a.update(over)
    return a


@pytest.mark.parametrize("over,error,match", [
    ({"kv_input_layout": "TND"}, ValueError, "expected kv_input_layout the same layout"),
    ({"q_input_layout": "BSND", "kv_input_layout": "BSND"}, ValueError,
     "expected q_input_layout one of"),
    ({"block_shape": [128, 64]}, ValueError,
     r"expected block_shape blockShapeY \(block_shape\[1\]\) a multiple of 128"),
    ({"block_shape": [0, 128]}, ValueError, "expected block_shape positive"),
    ({"block_shape": [128]}, ValueError, "expected block_shape at least two"),
    ({"num_key_value_heads": 1}, ValueError, "expected num_key_value_heads the head count"),
    ({"block_sparse_mask": torch.ones(1, 2, 2, 2, dtype=torch.int8)}, RuntimeError,
     "expected block_sparse_mask shape"),
    ({"block_sparse_mask": torch.ones(1, 2, 1, 2)}, TypeError,
     "expected block_sparse_mask dtype"),
    ({"inner_precise": 2}, ValueError, "expected inner_precise one of"),
    ({"softmax_lse_flag": 3}, ValueError, "expected softmax_lse_flag one of"),
    ({"actual_seq_lengths": [8]}, ValueError, "expected actual_seq_lengths_kv to be given"),
    ({"actual_seq_lengths": [9], "actual_seq_lengths_kv": [130]}, ValueError,
     "expected actual_seq_lengths lengths at most the padded"),
])
def test_bad_inputs(over, error, match):
    with pytest.raises(error, match="npu_block_sparse_attention: " + match):
        npu_anywhere.npu_block_sparse_attention(**_bad(**over))
    with pytest.raises(RuntimeError):       # torch_npu callers catch RuntimeError
        torch.ops.npu.npu_block_sparse_attention(**_bad(**over))


def test_bad_dtypes_and_dims():
    q, k, v = _bnsd(1, 2, 2, 8, 130, 64, BF16)
    with pytest.raises(ValueError, match="expected inner_precise 0 .* bfloat16"):
        npu_anywhere.npu_block_sparse_attention(**_bad(query=q, key=k, value=v))
    q, k, v = _bnsd(1, 2, 2, 8, 130, 32, F16)
    with pytest.raises(ValueError, match=r"expected query a head dim D in \[64, 128\]"):
        npu_anywhere.npu_block_sparse_attention(**_bad(query=q, key=k, value=v))
    q, k, v = _bnsd(1, 2, 2, 8, 130, 64, torch.float32)
    with pytest.raises(TypeError, match="expected query dtype in"):
        npu_anywhere.npu_block_sparse_attention(**_bad(query=q, key=k, value=v))
    with pytest.raises(TypeError, match="expected key the same dtype as query"):
        npu_anywhere.npu_block_sparse_attention(**_bad(key=k.half()[..., :64].float()))


def test_tnd_bad_lengths():
    q = torch.randn(10, 2, 64).half()
    k, v = torch.randn(12, 1, 64).half(), torch.randn(12, 1, 64).half()
    mask = torch.ones(2, 2, 1, 1, dtype=torch.int8)
    call = lambda **kw: npu_anywhere.npu_block_sparse_attention(  # noqa: E731
        q, k, v, mask, [128, 128], **kw)
    with pytest.raises(ValueError, match="expected actual_seq_lengths a list"):
        call()
    # op-plugin's own words (its tests match them): RuntimeError too, as torch_npu raises
    with pytest.raises(RuntimeError, match="actual_seq_lengths must be specified when "
                                           "q_input_layout is TND"):
        call()
    with pytest.raises(RuntimeError, match="actual_seq_lengths_kv must be specified when "
                                           "kv_input_layout is TND"):
        call(actual_seq_lengths=[4, 6])
    with pytest.raises(ValueError, match="summing to query's token count 10"):
        call(actual_seq_lengths=[4, 5], actual_seq_lengths_kv=[6, 6])
    with pytest.raises(ValueError, match="expected actual_seq_lengths_kv 2 lengths"):
        call(actual_seq_lengths=[4, 6], actual_seq_lengths_kv=[12])
    out, _ = call(actual_seq_lengths=[4, 6], actual_seq_lengths_kv=[6, 6], scale_value=0.1)
    assert out.shape == q.shape


def test_strict_mode_rules():
    a = _bad()
    with strict("A2"):
        npu_anywhere.npu_block_sparse_attention(**a)
        with pytest.raises(TypeError, match="expected block_sparse_mask dtype in"):
            npu_anywhere.npu_block_sparse_attention(
                **_bad(block_sparse_mask=torch.ones(1, 2, 1, 2, dtype=torch.int32)))
        npu_anywhere.npu_block_sparse_attention(
            **_bad(block_sparse_mask=torch.ones(1, 2, 1, 2, dtype=torch.bool)))
        q, k, v = _bnsd(1, 2, 2, 8, 130, 64, F64)
        with pytest.raises(TypeError, match="expected query dtype in"):
            npu_anywhere.npu_block_sparse_attention(**_bad(query=q, key=k, value=v))
    with strict("A3"):
        out, lse = npu_anywhere.npu_block_sparse_attention(**a)
        with pytest.raises(ValueError, match="backward: expected query a head dim D of 128"):
            npu_anywhere.npu_block_sparse_attention_backward(
                out, a["query"], a["key"], a["value"], out, lse, a["block_sparse_mask"], None,
                None, None, "BNSD", "BNSD", 2, 0.1)
        q, k, v = _bnsd(1, 2, 2, 8, 130, 128, F16)
        o, l = npu_anywhere.npu_block_sparse_attention(**_bad(query=q, key=k, value=v))
        npu_anywhere.npu_block_sparse_attention_backward(
            o, q, k, v, o, l, a["block_sparse_mask"], None, None, None, "BNSD", "BNSD", 2, 0.1)
        with pytest.raises(ValueError, match=r"backward: expected block_shape blockShapeX"):
            npu_anywhere.npu_block_sparse_attention_backward(
                o, q, k, v, o, l, a["block_sparse_mask"], [8, 128], None,
                None, "BNSD", "BNSD", 2, 0.1)
    for product in ("950", "310P"):
        with strict(product), pytest.raises(RuntimeError, match="expected a product"):
            npu_anywhere.npu_block_sparse_attention(**a)


@pytest.fixture
def solver(monkeypatch):
    """Force the dense-rows or the block-gather solver (chosen by blockShapeX otherwise)."""
    from npu_anywhere.ops.training_attention import bsa_math

    def use(kind):
        monkeypatch.setattr(bsa_math, "GATHER_MIN_BLOCK_X", 1 if kind == "gather" else 10 ** 9)
    return use


@pytest.fixture(params=("reference", FAST_PROVIDER))
def provider(request):
    """Run through the reference, or through the fast provider (gather solver only)."""
    with npu_anywhere.use_providers(request.param):
        yield request.param


# The fast provider takes only the gather solver's calls, and splits its own groups by the
# 1 << 16 budget: it runs the gather cases without the one-block budget.
SOLVER_CASES = [(kind, budget, provider)
                for kind, budget in [("gather", None), ("dense", None), ("gather", 1),
                                     ("dense", 1 << 12), ("gather", 1 << 16)]
                for provider in ("reference", FAST_PROVIDER)
                if provider == "reference" or (kind == "gather" and budget != 1)]


@pytest.mark.parametrize("kind,budget,provider_name", SOLVER_CASES)
def test_both_solvers_match_golden_forward_and_backward(solver, monkeypatch, kind, budget,
                                                        provider_name):
    with npu_anywhere.use_providers(provider_name):
        _solvers_match_golden(solver, monkeypatch, kind, budget)


def _solvers_match_golden(solver, monkeypatch, kind, budget):
    solver(kind)
    if budget is not None:      # one query block (gather) or a few rows (dense) per step
        from npu_anywhere.ops.training_attention import bsa_math
        monkeypatch.setattr(bsa_math, "SCORE_BUDGET", budget)
    q_lens, kv_lens, n1, n2, d, bx, by, scale = [37, 70], [300, 129], 4, 2, 64, 16, 128, 0.15
    g = torch.Generator().manual_seed(31)
    q = torch.randn(sum(q_lens), n1, d, generator=g, dtype=F64)
    k = torch.randn(sum(kv_lens), n2, d, generator=g, dtype=F64)
    v = torch.randn(sum(kv_lens), n2, d, generator=g, dtype=F64)
    mask = _mask(2, n1, max(q_lens), max(kv_lens), bx, by, seed=32, density=0.5)
    mask[1, 2, 0] = 0                                       # a query block that sees nothing
    kw = dict(num_key_value_heads=n2, scale_value=scale, inner_precise=0,
              actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens)
    out, lse = npu_anywhere.npu_block_sparse_attention(q, k, v, mask, [bx, by], **kw)
    qc, kc = [0, 37, 107], [0, 300, 429]
    pieces = lambda x, c: [x[c[i]:c[i + 1]].transpose(0, 1) for i in range(2)]  # noqa: E731
    want, want_lse = golden(pieces(q, qc), pieces(k, kc), pieces(v, kc), list(mask), bx, by,
                            scale)
    torch.testing.assert_close(out, torch.cat([w.transpose(0, 1) for w in want]))
    torch.testing.assert_close(lse[..., 0], torch.cat([w.t() for w in want_lse]))
    dy = torch.randn(out.shape, generator=g, dtype=F64)
    grads = npu_anywhere.npu_block_sparse_attention_backward(
        dy, q, k, v, out, lse, mask, [bx, by], q_lens, kv_lens, "TND", "TND", n2, scale)
    xs = [t.clone().requires_grad_() for t in (q, k, v)]
    dense = []
    for i in range(2):          # the dense float64 formula per sequence, through autograd
        qi, ki, vi = (x[c[i]:c[i + 1]] for x, c in zip(xs, (qc, kc, kc)))
        s = torch.einsum("qnd,knd->nqk", qi, ki.repeat_interleave(2, 1)) * scale
        rows_block, cols_block = torch.arange(q_lens[i]) // bx, torch.arange(kv_lens[i]) // by
        keep = mask[i].bool()[:, rows_block][:, :, cols_block]
        p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
        dense.append(torch.einsum("nqk,knd->qnd", p, vi.repeat_interleave(2, 1)))
    torch.autograd.backward(torch.cat(dense), dy)
    for got, x in zip(grads, xs):
        torch.testing.assert_close(got, x.grad)


def test_gradcheck_gather_solver(solver, provider):
    solver("gather")
    g = torch.Generator().manual_seed(41)
    q = torch.randn(1, 2, 40, 64, generator=g, dtype=F64)
    k, v = (torch.randn(1, 1, 150, 64, generator=g, dtype=F64) for _ in range(2))
    mask = torch.tensor([[[[1, 0], [1, 1]], [[0, 1], [0, 0]]]], dtype=torch.int8)

    def f(q, k, v):
        return _bnsd_call(q, k, v, mask, [32, 128], scale_value=0.2, inner_precise=0)[0]

    assert torch.autograd.gradcheck(f, tuple(t.requires_grad_() for t in (q, k, v)),
                                    fast_mode=True)


@pytest.mark.parametrize("precise,dtype", [(0, F16), (1, F16), (0, BF16)])
def test_fast_provider_equals_reference_gather(precise, dtype):
    """The fast provider regroups and re-gathers the same blocks: the same arithmetic (equal on
    CPU; one output rounding allowed where index_add_ sums in another order)."""
    q, k, v = _bnsd(1, 4, 2, 200, 300, 64, dtype, seed=51)
    mask = _mask(1, 4, 200, 300, 32, 128, seed=52, density=0.4)
    mask[0, 1, 2] = 0
    kw = dict(scale_value=0.125, inner_precise=precise)
    res = {}
    for name in ("reference", FAST_PROVIDER):
        with npu_anywhere.use_providers(name):
            out, lse = _bnsd_call(q, k, v, mask, [32, 128], **kw)
            grads = npu_anywhere.npu_block_sparse_attention_backward(
                torch.ones_like(out), q, k, v, out, lse, mask, [32, 128], None, None, "BNSD",
                "BNSD", 2, 0.125)
        res[name] = (out, lse, *grads)
    ulp = 2 ** -7 if dtype == BF16 else 2 ** -10
    for ref, fast in zip(*res.values()):
        torch.testing.assert_close(fast.double(), ref.double(), atol=ulp, rtol=ulp)
