"""npu_dense_lightning_indexer_grad_kl_loss against float64 autograd of the documented loss:
KL(p || softmax(I)) with p the head-mean of the main attention's causal softmax and I the
indexer's weighted ReLU scores (the statistics computed here, independently)."""

import pytest
import torch

import npu_anywhere as na


def _inputs(seed, dtype=torch.float64, b=1, s1=4, s2=6, n1=2, n2=2, ni=3, d=16, dr=4):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.4):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    return dict(q=r(b, s1, n1, d), k=r(b, s2, n2, d), qi=r(b, s1, ni, d), ki=r(b, s2, 1, d),
                w=r(b, s1, ni), qr=r(b, s1, n1, dr), kr=r(b, s2, n2, dr))


def _golden(x, scale):
    """(d_qi, d_ki, d_w, loss, stats) for one BSND batch set, by float64 autograd."""
    q, k = torch.cat([x["q"], x["qr"]], -1).double(), torch.cat([x["k"], x["kr"]], -1).double()
    qi, ki, w = (x[n].double().clone().requires_grad_() for n in ("qi", "ki", "w"))
    b, s1, n1, _ = q.shape
    s2, n2 = k.shape[1], k.shape[2]
    hidden = torch.arange(s2)[None, :] > (s2 - s1 + torch.arange(s1))[:, None]
    logits = torch.einsum("bshd,bthd->bhst", q, k.repeat_interleave(n1 // n2, 2)) * scale
    logits = logits.masked_fill(hidden, float("-inf"))
    p = torch.softmax(logits, -1).mean(1)                                  # [B, S1, S2]
    index = (torch.relu(torch.einsum("bshd,btd->bhst", qi, ki[:, :, 0]))
             * w.permute(0, 2, 1)[..., None]).sum(1).masked_fill(hidden, float("-inf"))
    log_y = torch.log_softmax(index, -1)
    loss = (p * (torch.log(p.clamp_min(1e-8)) - log_y.masked_fill(hidden, 0))).sum()
    grads = torch.autograd.grad(loss, (qi, ki, w))
    mx = logits.amax(-1)                                                    # [B, N1, S1]
    sm = torch.exp(logits - mx[..., None]).sum(-1)
    stats = (mx.reshape(b, n2, n1 // n2, s1).permute(0, 1, 3, 2).float(),
             sm.reshape(b, n2, n1 // n2, s1).permute(0, 1, 3, 2).float(),
             index.detach().amax(-1)[:, None].float(),
             torch.exp(index.detach() - index.detach().amax(-1, keepdim=True)).sum(-1)[:, None]
             .float())
    return grads, loss.detach(), stats


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_bsnd_matches_autograd_of_the_loss(dtype):
    x = _inputs(1, dtype, b=2)
    (gqi, gki, gw), loss, stats = _golden(x, 0.3)
    dqi, dki, dw, got_loss = na.npu_dense_lightning_indexer_grad_kl_loss(
        x["q"], x["k"], x["qi"], x["ki"], x["w"], *stats, 0.3, query_rope=x["qr"],
        key_rope=x["kr"])
    assert got_loss.shape == (1,) and got_loss.dtype == torch.float32
    assert dqi.dtype == dki.dtype == dw.dtype == dtype
    tol = 1e-4 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(got_loss[0].double(), loss, rtol=tol, atol=tol)
    for got, want in ((dqi, gqi), (dki, gki), (dw, gw)):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_tnd_equals_per_batch_bsnd():
    xs = [_inputs(2), _inputs(3, s1=3, s2=5)]
    stats = [_golden(x, 0.5)[2] for x in xs]
    per_batch = [na.npu_dense_lightning_indexer_grad_kl_loss(
        x["q"], x["k"], x["qi"], x["ki"], x["w"], *st, 0.5, query_rope=x["qr"], key_rope=x["kr"])
        for x, st in zip(xs, stats)]

    def cat(name):
        return torch.cat([x[name][0] for x in xs])

    def cat_stats(i, dim):
        return torch.cat([st[i][0] for st in stats], dim)

    out = torch.ops.npu.npu_dense_lightning_indexer_grad_kl_loss(
        cat("q"), cat("k"), cat("qi"), cat("ki"), cat("w"), cat_stats(0, 1), cat_stats(1, 1),
        cat_stats(2, 1), cat_stats(3, 1), 0.5, query_rope=cat("qr"), key_rope=cat("kr"),
        actual_seq_qlen=[4, 7], actual_seq_klen=[6, 11], layout="TND")
    torch.testing.assert_close(out[0], torch.cat([o[0][0] for o in per_batch]))
    torch.testing.assert_close(out[1], torch.cat([o[1][0] for o in per_batch]))
    torch.testing.assert_close(out[3], per_batch[0][3] + per_batch[1][3])


def test_bad_inputs():
    x = _inputs(4)
    stats = _golden(x, 0.3)[2]
    with pytest.raises(ValueError, match="expected sparse_mode 3"):
        na.npu_dense_lightning_indexer_grad_kl_loss(x["q"], x["k"], x["qi"], x["ki"], x["w"],
                                                    *stats, 0.3, sparse_mode=0)
    with pytest.raises(RuntimeError, match="expected softmax_max shape"):
        na.npu_dense_lightning_indexer_grad_kl_loss(x["q"], x["k"], x["qi"], x["ki"], x["w"],
                                                    stats[0][..., :0], *stats[1:], 0.3)
    with pytest.raises(ValueError, match="expected query_rope given together with key_rope"):
        na.npu_dense_lightning_indexer_grad_kl_loss(x["q"], x["k"], x["qi"], x["ki"], x["w"],
                                                    *stats, 0.3, query_rope=x["qr"])
