"""npu_fusion_attention with a caller's bit-packed ``dropout_mask``: forward and backward in
eager, under FakeTensor and under ``torch.compile(fullgraph=True)``.

The golden is seed 004's formula in float64 (fa_golden.py) with the keep-mask unpacked here from
the bytes the test builds (``_npu_dropout_gen_mask``'s packing: element ``e`` of
``[B, N, Sq, Skv]`` is bit ``e % 8``, least significant first, of byte ``e // 8``).  The
backward of such a forward runs through the internal op
``_npu_fusion_attention_grad_dropout_mask``, since derivatives.yaml's grad op has no mask input.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from fa_golden import attention, visible

TRIU = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
KEEP_PROB = 0.7


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 31 * sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _pack(keep: torch.Tensor) -> torch.Tensor:
    """bool keep-mask -> uint8 bytes, LSB first, padded with zero bytes to 16-byte blocks."""
    flat = keep.reshape(-1).to(torch.int64)
    flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % 128)])
    weights = 2 ** torch.arange(8)
    return (flat.view(-1, 8) * weights).sum(1).to(torch.uint8)


def _keep(*shape, seed=9):
    return _rand(*shape, seed=seed) > -0.5        # about 70 % kept


def _golden(q, k, v, dy, keep, scale, vis=None, pse=None):
    """float64 output and (dq, dk, dv[, dpse]) by autograd of the doc formula."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    if pse is not None:
        leaves.append(pse.detach().double().requires_grad_())
    out = attention(*leaves[:3], scale, vis=vis, pse=leaves[3] if pse is not None else None,
                    keep=keep.double(), keep_prob=KEEP_PROB)[0]
    grads = torch.autograd.grad(out, leaves, dy.double())
    return out.detach(), grads


def _call(q, k, v, n, bits, **kw):
    return torch.ops.npu.npu_fusion_attention(q, k, v, n, "BNSD", keep_prob=KEEP_PROB,
                                              dropout_mask=bits, seed=11, offset=4, **kw)


def _case():
    b, n, nkv, sq, skv, d = 2, 4, 2, 5, 7, 4
    q, k, v = _rand(b, n, sq, d), _rand(b, nkv, skv, d, seed=1), _rand(b, nkv, skv, d, seed=2)
    pse = _rand(b, n, sq, skv, seed=3)
    dy = _rand(b, n, sq, d, seed=4)
    keep = _keep(b, n, sq, skv)
    return q, k, v, pse, dy, keep, n


def _run(fn, q, k, v, pse, dy, bits, n):
    leaves = [t.clone().requires_grad_() for t in (q, k, v, pse)]
    res = fn(*leaves, bits)
    res[0].backward(dy)
    return res, [t.grad for t in leaves]


def _eager(q, k, v, pse, bits, n, mask=TRIU):
    return _call(q, k, v, n, bits, pse=pse, atten_mask=mask, sparse_mode=3, scale=0.5)


def test_forward_and_backward_use_the_callers_mask_exactly():
    q, k, v, pse, dy, keep, n = _case()
    bits = _pack(keep)
    res, grads = _run(lambda *a: _eager(*a, n), q, k, v, pse, dy, bits, n)
    vis = visible(3, q.shape[2], k.shape[2])
    want, want_grads = _golden(q, k, v, dy, keep, 0.5, vis=vis, pse=pse)
    torch.testing.assert_close(res[0].double(), want, atol=2e-5, rtol=2e-5)
    assert res[4:] == (11, 4, keep.numel())
    for got, ref in zip(grads, want_grads):
        torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)


def test_a_different_mask_changes_the_gradients():
    # guards against a backward that ignores the bits (regenerating a mask from seed / offset)
    q, k, v, pse, dy, keep, n = _case()
    _, g1 = _run(lambda *a: _eager(*a, n), q, k, v, pse, dy, _pack(keep), n)
    _, g2 = _run(lambda *a: _eager(*a, n), q, k, v, pse, dy, _pack(~keep), n)
    assert not torch.allclose(g1[2], g2[2])


def test_compile_fullgraph_forward_and_backward_match_eager_through_the_mask_grad_op():
    from torch._dynamo.testing import AotEagerAndRecordGraphs
    q, k, v, pse, dy, keep, n = _case()
    bits = _pack(keep)
    backend = AotEagerAndRecordGraphs()
    compiled = torch.compile(lambda *a: _eager(*a, n), fullgraph=True, backend=backend)
    got, got_grads = _run(compiled, q, k, v, pse, dy, bits, n)
    want, want_grads = _run(lambda *a: _eager(*a, n), q, k, v, pse, dy, bits, n)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    backward_code = "".join(g.code for g in backend.bw_graphs)
    assert "_npu_fusion_attention_grad_dropout_mask" in backward_code


def test_compile_fullgraph_tnd_where_eager_skips_fully_masked_tiles():
    # TND with a right-down causal mask: the backward skips tiles by looking at mask values,
    # which only an opaque op can do inside a traced graph
    q_lens, kv_lens, n = [2, 3], [3, 4], 2
    q, k, v = _rand(5, n, 4), _rand(7, n, 4, seed=1), _rand(7, n, 4, seed=2)
    keeps = [_keep(n, a, c, seed=20 + i) for i, (a, c) in enumerate(zip(q_lens, kv_lens))]
    bits = _pack(torch.cat([t.reshape(-1) for t in keeps]))
    dy = _rand(5, n, 4, seed=3)

    def f(q, k, v, bits):
        return torch.ops.npu.npu_fusion_attention(
            q, k, v, n, "TND", atten_mask=TRIU, sparse_mode=3, keep_prob=KEEP_PROB,
            dropout_mask=bits, actual_seq_qlen=[2, 5], actual_seq_kvlen=[3, 7])[0]
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.compile(f, fullgraph=True, backend="aot_eager")(*leaves, bits).backward(dy)
    qs = ks = 0
    for keep, a, c in zip(keeps, q_lens, kv_lens):
        to4 = lambda t: t.permute(1, 0, 2).unsqueeze(0)
        _, grads = _golden(to4(q[qs:qs + a]), to4(k[ks:ks + c]), to4(v[ks:ks + c]),
                           to4(dy[qs:qs + a]), keep.unsqueeze(0), 1.0, vis=visible(3, a, c))
        for leaf, ref, s0, length in zip(leaves, grads, (qs, ks, ks), (a, c, c)):
            got = to4(leaf.grad[s0:s0 + length]).double()
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
        qs, ks = qs + a, ks + c


def test_fake_tensor_forward_and_backward_give_the_shapes():
    q, k, v, pse, dy, keep, n = _case()
    bits = _pack(keep)
    with FakeTensorMode() as mode:
        leaves = [mode.from_tensor(t).requires_grad_() for t in (q, k, v, pse)]
        res = _eager(*leaves, mode.from_tensor(bits), n, mode.from_tensor(TRIU))
        res[0].backward(mode.from_tensor(dy))
        assert [tuple(t.grad.shape) for t in leaves] == [tuple(t.shape) for t in (q, k, v, pse)]
        assert res[4:] == (11, 4, keep.numel())


def test_gradcheck_float64_with_a_mask():
    b, n, s, d = 1, 2, 3, 3
    q, k, v = (_rand(b, n, s, d, dtype=torch.float64, seed=i).requires_grad_() for i in range(3))
    bits = _pack(_keep(b, n, s, s))

    def f(q, k, v):
        return _call(q, k, v, n, bits, scale=0.8)[0]
    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


def test_mask_grad_op_checks_name_it_and_run_before_any_work():
    from npu_anywhere.ops.training_attention.fusion_attention import (
        fusion_attention_grad_dropout_mask_op as op, fusion_attention_reference)
    q, k, v, pse, dy, keep, n = _case()
    out, smax, ssum = fusion_attention_reference(q, k, v, n, "BNSD")[:3]
    kw = dict(softmax_max=smax, softmax_sum=ssum, attention_in=out, keep_prob=KEEP_PROB)
    bits = _pack(keep)
    short = bits[:10]
    with pytest.raises(RuntimeError, match="_npu_fusion_attention_grad_dropout_mask: expected "
                                           "dropout_mask at least"):
        op(q, k, v, dy, n, "BNSD", short, **kw)
    with pytest.raises(TypeError, match="_npu_fusion_attention_grad_dropout_mask: expected "
                                        "dropout_mask dtype"):
        op(q, k, v, dy, n, "BNSD", bits.float(), **kw)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (q, k, v, dy, short)]
        fkw = {key: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
               for key, t in kw.items()}
        with pytest.raises(RuntimeError, match="expected dropout_mask at least"):
            op(*fake[:4], n, "BNSD", fake[4], **fkw)


def test_public_grad_schema_keeps_the_yaml_arguments():
    schema = torch.ops.npu.npu_fusion_attention_grad.default._schema
    assert "dropout_mask" not in [a.name for a in schema.arguments]
