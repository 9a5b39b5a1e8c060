"""npu_fused_floyd_attention (+ backward) against a float64 golden of the documented formula."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere
from npu_anywhere import strict
from npu_anywhere.ops.training_attention.floyd_attention import FAST_PROVIDER

F16, BF16, F64 = torch.float16, torch.bfloat16, torch.float64
PROVIDERS = ("reference", FAST_PROVIDER)


@pytest.fixture(params=PROVIDERS)
def provider(request):
    """Each test below runs through the reference and through the fast provider."""
    with npu_anywhere.use_providers(request.param):
        yield request.param


def _inputs(dtype, b=1, h=2, m=3, n=5, k=7, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    return (mk(b, h, m, n, d), mk(b, h, m, k, d), mk(b, h, m, k, d), mk(b, h, k, n, d),
            mk(b, h, k, n, d))


def golden(q, k_ij, v_ij, k_jk, v_jk, mask, scale):
    """The seed formula in float64: softmax over the pivot axis k (no fully masked rows)."""
    q, k_ij, v_ij, k_jk, v_jk = (t.double() for t in (q, k_ij, v_ij, k_jk, v_jk))
    s = scale * (torch.einsum("bhmnd,bhmkd->bhmnk", q, k_ij)
                 + torch.einsum("bhmnd,bhknd->bhmnk", q, k_jk))
    if mask is not None:
        s = s.masked_fill(mask.bool(), float("-inf"))
    mx = s.amax(-1)
    total = torch.exp(s - mx.unsqueeze(-1)).sum(-1)
    p = torch.softmax(s, -1)
    out = torch.einsum("bhmnk,bhmkd->bhmnd", p, v_ij) + torch.einsum("bhmnk,bhknd->bhmnd", p, v_jk)
    return mx, total, out


def _mask(b, m, k, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, 1, m, 1, k, generator=g) < 0.4
    mask[..., 0] = False                                  # every row keeps a key
    return mask


@pytest.mark.parametrize("dtype,masked", [(BF16, True), (F16, False), (F16, True)])
def test_forward_against_golden(dtype, masked, provider):
    b, h, m, n, k, d, scale = 2, 2, 3, 5, 9, 48, 0.15
    ins = _inputs(dtype, b, h, m, n, k, d)
    mask = _mask(b, m, k) if masked else None
    before = [t.clone() for t in ins]
    smax, ssum, out = npu_anywhere.npu_fused_floyd_attention(*ins, atten_mask=mask,
                                                             scale_value=scale)
    for t, t0 in zip(ins, before):
        assert torch.equal(t, t0)
    assert smax.shape == ssum.shape == (b, h, m, n, 8) and smax.dtype == torch.float32
    assert out.shape == ins[0].shape and out.dtype == dtype
    assert torch.equal(smax, smax[..., :1].expand_as(smax))
    mx, total, want = golden(*ins, mask, scale)
    tol = 2e-2 if dtype == BF16 else 3e-3
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(smax[..., 0].double(), mx, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ssum[..., 0].double(), total, atol=1e-4, rtol=1e-5)


def test_uint8_mask_noncontiguous_and_fully_masked_row(provider):
    b, h, m, n, k, d = 1, 1, 2, 4, 6, 32
    ins = list(_inputs(F16, b, h, m, n, k, d, seed=4))
    ins[0] = ins[0].transpose(2, 3).contiguous().transpose(2, 3)     # non-contiguous query
    ins[3] = ins[3].transpose(2, 3).contiguous().transpose(2, 3)     # and key_jk
    ins[4] = ins[4].transpose(-1, -2).contiguous().transpose(-1, -2)  # and value_jk
    mask = _mask(b, m, k, seed=5)
    mask[0, 0, 1, 0, :] = True                                       # row m = 1 sees nothing
    _, ssum, out = npu_anywhere.npu_fused_floyd_attention(*ins, atten_mask=mask.to(torch.uint8),
                                                          scale_value=0.2)
    _, _, want = golden(*[t[:, :, :1] if i in (0, 1, 2) else t for i, t in enumerate(ins)],
                        mask[:, :, :1], 0.2)
    torch.testing.assert_close(out[:, :, :1].double(), want, atol=3e-3, rtol=3e-3)
    # masked scores become the lowest float32: the fully masked row averages every k
    avg = ins[2][0, 0, 1].double().mean(0) + ins[4][0, 0].double().mean(0)
    torch.testing.assert_close(out[0, 0, 1].double(), avg.expand(n, d), atol=3e-3, rtol=3e-3)
    assert torch.all(ssum[0, 0, 1] == k)


def _golden_grads(ins, mask, scale, dy):
    xs = [t.detach().double().requires_grad_() for t in ins]
    golden(*xs, mask, scale)[2].backward(dy.double())
    return [x.grad for x in xs]


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_backward_op_against_golden_gradients(dtype, provider):
    ins = _inputs(dtype, 1, 2, 3, 4, 6, 32, seed=7)
    mask = _mask(1, 3, 6, seed=8)
    smax, ssum, out = npu_anywhere.npu_fused_floyd_attention(*ins, atten_mask=mask,
                                                             scale_value=0.25)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    got = npu_anywhere.npu_fused_floyd_attention_backward(dy, *ins, out, smax, ssum,
                                                          atten_mask=mask, scale_value=0.25)
    want = _golden_grads(ins, mask, 0.25, dy)
    tol = 6e-2 if dtype == BF16 else 1e-2
    for name, g_, w, t in zip(("dq", "dk_ij", "dv_ij", "dk_jk", "dv_jk"), got, want, ins):
        assert g_.shape == t.shape and g_.dtype == dtype and g_.is_contiguous(), name
        torch.testing.assert_close(g_.double(), w, atol=tol, rtol=tol, msg=name)


def test_gradcheck_float64(provider):
    ins = tuple(t.requires_grad_() for t in _inputs(F64, 1, 2, 3, 2, 4, 32, seed=10))
    mask = _mask(1, 3, 4, seed=11)

    def f(*xs):
        return npu_anywhere.npu_fused_floyd_attention(*xs, atten_mask=mask, scale_value=0.3)[2]

    assert torch.autograd.gradcheck(f, ins, fast_mode=True)


def test_bad_inputs():
    q, kij, vij, kjk, vjk = _inputs(BF16)
    call = npu_anywhere.npu_fused_floyd_attention
    with pytest.raises(RuntimeError, match="npu_fused_floyd_attention: expected value_ij shape"):
        call(q, kij, vij[:, :, :, :3], kjk, vjk)
    with pytest.raises(RuntimeError, match="expected key_jk shape"):
        call(q, kij, vij, kjk[:, :, :, :2], vjk)
    with pytest.raises(ValueError, match="expected query_ik a 5-D tensor"):
        call(q[0], kij, vij, kjk, vjk)
    with pytest.raises(TypeError, match="expected key_ij the same dtype as query_ik"):
        call(q, kij.half(), vij, kjk, vjk)
    with pytest.raises(TypeError, match="expected query_ik dtype in"):
        call(*(t.float() for t in (q, kij, vij, kjk, vjk)))
    with pytest.raises(RuntimeError, match=r"expected atten_mask shape \[1, 1, 3, 1, 7\]"):
        call(q, kij, vij, kjk, vjk, atten_mask=torch.zeros(1, 1, 3, 5, 7, dtype=torch.bool))
    with pytest.raises(TypeError, match="expected atten_mask dtype"):
        call(q, kij, vij, kjk, vjk, atten_mask=torch.zeros(1, 1, 3, 1, 7))
    with pytest.raises(ValueError, match=r"expected query_ik a head dim D in \[32, 256\]"):
        call(*_inputs(BF16, d=16))
    smax, ssum, out = call(q, kij, vij, kjk, vjk)
    with pytest.raises(RuntimeError, match="backward: expected softmax_sum shape"):
        npu_anywhere.npu_fused_floyd_attention_backward(out, q, kij, vij, kjk, vjk, out, smax,
                                                        ssum[..., :1])
    with pytest.raises(RuntimeError):          # torch_npu callers catch RuntimeError
        torch.ops.npu.npu_fused_floyd_attention(q, kij, vij, kjk[:, :, :, :2], vjk)


def test_strict_mode_rules():
    seed_shape = dict(b=1, h=1, m=16, n=128, k=128, d=32)
    with strict("A2"):
        npu_anywhere.npu_fused_floyd_attention(*_inputs(BF16, **seed_shape), scale_value=0.1)
        with pytest.raises(ValueError, match="expected query_ik M a multiple of 16"):
            npu_anywhere.npu_fused_floyd_attention(*_inputs(BF16, **{**seed_shape, "m": 8}))
        with pytest.raises(ValueError, match="expected key_ij K a multiple of 128"):
            npu_anywhere.npu_fused_floyd_attention(*_inputs(BF16, **{**seed_shape, "k": 64}))
        with pytest.raises(ValueError, match=r"expected query_ik a head dim D in \[32, 64, 128\]"):
            npu_anywhere.npu_fused_floyd_attention(*_inputs(BF16, **{**seed_shape, "d": 48}))
        with pytest.raises(TypeError, match="expected query_ik dtype in"):
            npu_anywhere.npu_fused_floyd_attention(*_inputs(F64))
    for product in ("950", "310P"):
        with strict(product), pytest.raises(RuntimeError, match="expected a product"):
            npu_anywhere.npu_fused_floyd_attention(*_inputs(BF16))


def test_row_blocks_and_broadcast_masks(monkeypatch, provider):
    """One query row per block (a tiny score budget) and masks broadcast over H / over M."""
    from npu_anywhere.ops.training_attention import floyd_attention
    monkeypatch.setattr(floyd_attention, "SCORE_BUDGET", 1)
    ins = _inputs(F16, 1, 2, 3, 4, 6, 32, seed=12)
    g = torch.Generator().manual_seed(13)
    for mask in (torch.rand(1, 2, 3, 1, 6, generator=g) < 0.4,        # per head
                 torch.rand(1, 1, 1, 1, 6, generator=g) < 0.4):       # one row for every m
        mask[..., 0] = False
        smax, ssum, out = npu_anywhere.npu_fused_floyd_attention(*ins, atten_mask=mask,
                                                                 scale_value=0.3)
        mx, total, want = golden(*ins, mask, 0.3)
        torch.testing.assert_close(out.double(), want, atol=3e-3, rtol=3e-3)
        torch.testing.assert_close(ssum[..., 0].double(), total, atol=1e-4, rtol=1e-5)
        dy = torch.randn(out.shape, generator=g).half()
        got = npu_anywhere.npu_fused_floyd_attention_backward(dy, *ins, out, smax, ssum,
                                                              atten_mask=mask, scale_value=0.3)
        for g_, w in zip(got, _golden_grads(ins, mask, 0.3, dy)):
            torch.testing.assert_close(g_.double(), w, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_fast_provider_matches_reference(dtype):
    """Same roundings: the fast path equals the reference up to float32 summation order."""
    ins = _inputs(dtype, 2, 2, 5, 6, 8, 32, seed=14)
    mask = _mask(2, 5, 8, seed=15)
    dy = torch.randn(ins[0].shape, generator=torch.Generator().manual_seed(16)).to(dtype)
    results = {}
    for name in PROVIDERS:
        with npu_anywhere.use_providers(name):
            fwd = npu_anywhere.npu_fused_floyd_attention(*ins, atten_mask=mask, scale_value=0.2)
            bwd = npu_anywhere.npu_fused_floyd_attention_backward(
                dy, *ins, fwd[2], fwd[0], fwd[1], atten_mask=mask, scale_value=0.2)
        results[name] = (*fwd, *bwd)
    ulp = 2 ** -7 if dtype == BF16 else 2 ** -10
    for ref, fast in zip(*results.values()):
        # at most one output rounding apart (float32 sums in another order)
        torch.testing.assert_close(fast.double(), ref.double(), atol=ulp, rtol=ulp)
