"""npu_sparse_lightning_indexer_grad_kl_loss against float64 autograd of the documented loss:
KL(p || softmax(I)) over each token's selected keys, p the head-mean of the main attention's
softmax over that selection and I the indexer's weighted ReLU scores (statistics computed
here, independently, over a dense masked score matrix)."""

import pytest
import torch

import npu_anywhere as na

OP = na.npu_sparse_lightning_indexer_grad_kl_loss


def _inputs(seed, dtype=torch.float64, b=1, s1=4, s2=7, n1=4, ni=3, d=16, dr=4, topk=4):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.4):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    # each row picks distinct visible keys, then -1 padding; row 0 past the diagonal too
    idx = torch.full((b, s1, 1, topk), -1, dtype=torch.int32)
    for bi in range(b):
        for t in range(s1):
            seen = max(s2 - s1 + t + 1, 0)
            chosen = torch.randperm(seen, generator=g)[:min(seen, topk - (t % 2))]
            idx[bi, t, 0, :len(chosen)] = chosen.to(torch.int32)
    idx[:, 0, 0, -1] = s2 - 1          # beyond row 0's causal bound: must count as padding
    return dict(q=r(b, s1, n1, d), k=r(b, s2, 1, d), qi=r(b, s1, ni, d), ki=r(b, s2, 1, d),
                w=r(b, s1, ni), qr=r(b, s1, n1, dr), kr=r(b, s2, 1, dr), idx=idx,
                sinks=r(n1, scale=1.0).float())


def _golden(x, scale, sinks=False):
    """(d_qi, d_ki, d_w), loss, (softmax_max, softmax_sum) by float64 autograd (BSND)."""
    q, k = torch.cat([x["q"], x["qr"]], -1).double(), torch.cat([x["k"], x["kr"]], -1).double()
    qi, ki, w = (x[n].double().clone().requires_grad_() for n in ("qi", "ki", "w"))
    b, s1, n1, _ = q.shape
    s2 = k.shape[1]
    causal = torch.arange(s2)[None, :] <= (s2 - s1 + torch.arange(s1))[:, None]
    picked = torch.zeros(b, s1, s2, dtype=torch.bool)
    for bi in range(b):
        for t in range(s1):
            js = x["idx"][bi, t, 0]
            picked[bi, t, js[js >= 0].long()] = True
    sel = picked & causal                                                   # [B, S1, S2]
    logits = torch.einsum("bshd,btd->bhst", q, k[:, :, 0]) * scale
    logits = logits.masked_fill(~sel[:, None], float("-inf"))
    if sinks:
        sink = x["sinks"].double()[None, :, None, None].expand(b, n1, s1, 1)
        full = torch.cat([logits, sink], -1)
        probs = torch.softmax(full, -1)[..., :-1]
        mx, sm = full.amax(-1), torch.exp(full - full.amax(-1, keepdim=True)).sum(-1)
        p = probs.sum(1)
        p = p / p.sum(-1, keepdim=True)
    else:
        p = torch.softmax(logits, -1).mean(1)                               # [B, S1, S2]
        mx, sm = logits.amax(-1), torch.exp(logits - logits.amax(-1, keepdim=True)).sum(-1)
    index = (torch.relu(torch.einsum("bshd,btd->bhst", qi, ki[:, :, 0]))
             * w.permute(0, 2, 1)[..., None]).sum(1).masked_fill(~sel, float("-inf"))
    log_y = torch.log_softmax(index, -1).masked_fill(~sel, 0)
    loss = (p * (torch.log(p.clamp_min(1e-8)) - log_y)).sum()
    grads = torch.autograd.grad(loss, (qi, ki, w))
    stats = (mx.permute(0, 2, 1)[:, None].float(), sm.permute(0, 2, 1)[:, None].float())
    return grads, loss.detach(), stats                                       # [B, 1, S1, N1]


@pytest.mark.parametrize("dtype,sinks", [(torch.float64, False), (torch.float64, True),
                                         (torch.bfloat16, False)])
def test_bsnd_matches_autograd_of_the_loss(dtype, sinks):
    x = _inputs(1, dtype, b=2)
    (gqi, gki, gw), loss, stats = _golden(x, 0.3, sinks)
    dqi, dki, dw, got_loss = OP(
        x["q"], x["k"], x["qi"], x["ki"], x["w"].float() if dtype != torch.float64 else x["w"],
        x["idx"], *stats, 0.3, query_rope=x["qr"], key_rope=x["kr"],
        sinks=x["sinks"] if sinks else None)
    assert got_loss.shape == (1,) and got_loss.dtype == torch.float32
    assert dqi.dtype == dki.dtype == dtype
    assert dw.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    tol = 1e-4 if dtype == torch.float64 else 4e-2
    torch.testing.assert_close(got_loss[0].double(), loss, rtol=tol, atol=tol)
    for got, want in ((dqi, gqi), (dki, gki), (dw, gw)):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_tnd_equals_per_batch_bsnd_on_non_contiguous_inputs():
    xs = [_inputs(2), _inputs(3, s1=3, s2=5)]
    stats = [_golden(x, 0.5)[2] for x in xs]
    per_batch = [OP(x["q"], x["k"], x["qi"], x["ki"], x["w"], x["idx"], *st, 0.5,
                    query_rope=x["qr"], key_rope=x["kr"]) for x, st in zip(xs, stats)]

    def cat(name):
        return torch.cat([x[name][0] for x in xs])

    # query_index as a transposed view: the op must read it through its strides
    qi = cat("qi").transpose(0, 1).contiguous().transpose(0, 1)
    assert not qi.is_contiguous()
    out = torch.ops.npu.npu_sparse_lightning_indexer_grad_kl_loss(
        cat("q"), cat("k"), qi, cat("ki"), cat("w"), cat("idx"),
        torch.cat([st[0][0] for st in stats], 1), torch.cat([st[1][0] for st in stats], 1),
        0.5, query_rope=cat("qr"), key_rope=cat("kr"), actual_seq_qlen=[4, 7],
        actual_seq_klen=[7, 12], layout="TND", pre_tokens=65536, next_tokens=65536)
    for i in range(3):
        torch.testing.assert_close(out[i], torch.cat([o[i][0] for o in per_batch]))
    torch.testing.assert_close(out[3], per_batch[0][3] + per_batch[1][3])


def test_a_key_picked_twice_is_scattered_twice():
    x = _inputs(5, s1=1, s2=3, topk=2)
    x["idx"] = torch.tensor([[[[1, 1]]]], dtype=torch.int32)
    once = dict(x, idx=torch.tensor([[[[1, -1]]]], dtype=torch.int32))
    stats = (torch.zeros(1, 1, 1, 4), torch.ones(1, 1, 1, 4))
    twice_out = OP(x["q"], x["k"], x["qi"], x["ki"], x["w"], x["idx"], *stats, 0.3)
    once_out = OP(once["q"], once["k"], once["qi"], once["ki"], once["w"], once["idx"], *stats,
                  0.3)
    # two equal slots: y = 1/2 each, p doubled; dI per slot = 1/2 - p vs 1 - p for one slot
    p = (x["q"][0, 0] @ x["k"][0, 1, 0] * 0.3).exp().mean()
    d_index_twice, d_index_once = 2 * (0.5 - p), 1 - p
    torch.testing.assert_close(twice_out[2] * d_index_once, once_out[2] * d_index_twice)
    assert twice_out[1][0, [0, 2]].abs().max() == 0


def test_bad_inputs():
    x = _inputs(4)
    stats = _golden(x, 0.3)[2]
    args = (x["q"], x["k"], x["qi"], x["ki"], x["w"], x["idx"], *stats, 0.3)
    with pytest.raises(ValueError, match="expected sparse_mode 3"):
        OP(*args, sparse_mode=0)
    with pytest.raises(TypeError, match="expected sparse_indices dtype"):
        OP(*args[:5], x["idx"].long(), *args[6:])
    with pytest.raises(RuntimeError, match="expected sparse_indices shape"):
        OP(*args[:5], x["idx"][:, :3], *args[6:])
    with pytest.raises(RuntimeError, match="expected sinks shape"):
        OP(*args, sinks=x["sinks"][:2])
    with pytest.raises(RuntimeError, match="expected softmax_sum shape"):
        OP(*args[:7], stats[1][..., :2], 0.3)


def test_rows_without_a_visible_key_add_nothing_and_empty_query_returns():
    # S1 = 5 > S2 = 3: rows 0 and 1 see no key, whatever their indices say
    x = _inputs(6, s1=5, s2=3, topk=3)
    idx = torch.tensor([0, 1, 2], dtype=torch.int32).repeat(1, 5, 1, 1)
    stats = (torch.zeros(1, 1, 5, 4), torch.ones(1, 1, 5, 4))
    full = OP(x["q"], x["k"], x["qi"], x["ki"], x["w"], idx, *stats, 0.3)
    tail = OP(x["q"][:, 2:], x["k"], x["qi"][:, 2:], x["ki"], x["w"][:, 2:], idx[:, 2:],
              stats[0][:, :, 2:], stats[1][:, :, 2:], 0.3)
    assert full[0][0, :2].abs().max() == 0 and full[2][0, :2].abs().max() == 0
    torch.testing.assert_close(full[3], tail[3])
    torch.testing.assert_close(full[1], tail[1])
    empty = OP(x["q"][:, :0], x["k"], x["qi"][:, :0], x["ki"], x["w"][:, :0], idx[:, :0],
               stats[0][:, :, :0], stats[1][:, :, :0], 0.3)
    assert empty[0].shape == (1, 0, 3, 16) and empty[3].item() == 0 and empty[1].abs().max() == 0


def test_strict_a2_takes_half_inputs_with_one_key_index_head():
    x = _inputs(7, torch.float16)
    stats = (torch.zeros(1, 1, 4, 4), torch.ones(1, 1, 4, 4))
    three_heads = x["ki"].expand(-1, -1, 3, -1)
    with na.strict("A2"):
        OP(x["q"], x["k"], x["qi"], x["ki"], x["w"], x["idx"], *stats, 0.3)
        with pytest.raises(ValueError, match="expected key_index a head count N2index of 1"):
            OP(x["q"], x["k"], x["qi"], three_heads, x["w"], x["idx"].expand(-1, -1, 3, -1),
               *stats, 0.3)
        with pytest.raises(TypeError, match="expected query dtype"):
            OP(*(x[n].double() for n in ("q", "k", "qi", "ki", "w")), x["idx"], *stats, 0.3)
