"""_npu_dropout_gen_mask: packing, statistics, and agreement with npu_fusion_attention's own mask.

Spec: op-plugin's yaml schema, ``FlashAttentionKernelNpuOpApi.cpp`` (``(numels + 127) / 128 * 128
/ 8`` bytes) and op-plugin's flash-attention tests, which unpack the mask with
``np.unpackbits(..., bitorder='little')`` and expect npu_fusion_attention (+ grad) with the same
seed / offset, or right after ``torch.npu.manual_seed(seed)``, to apply exactly that mask.  The
goldens here are seed 004's formula in float64 (fa_golden.py) with the unpacked bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from fa_golden import attention

gen_mask = torch.ops.npu._npu_dropout_gen_mask


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed + 17 * sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).float()


def _unpack(bits: torch.Tensor, count: int) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(bits.numpy(), count=count, bitorder="little")).bool()


def test_length_padding_and_drop_rate():
    n = 20000
    bits = gen_mask(torch.empty(1), [n], 0.25, 3, 0)
    assert bits.dtype == torch.uint8 and bits.shape == ((n + 127) // 128 * 16,)
    allbits = _unpack(bits, bits.numel() * 8)
    assert not allbits[n:].any()                       # pad bits are 0
    assert abs(allbits[:n].double().mean().item() - 0.75) < 0.02
    assert _unpack(gen_mask(torch.empty(1), [5, 7], 0.0, 3, 0), 35).all()
    assert not _unpack(gen_mask(torch.empty(1), [5, 7], 1.0, 3, 0), 35).any()


def test_same_seed_offset_repeat_and_the_shape_is_only_a_count():
    x = torch.empty(1)
    a = gen_mask(x, [2, 3, 40, 50], 0.3, 9, 4)
    assert torch.equal(a, gen_mask(x, [12000], 0.3, 9, 4))
    assert not torch.equal(a, gen_mask(x, [12000], 0.3, 9, 5))
    assert not torch.equal(a, gen_mask(x, [12000], 0.3, 8, 4))


def _golden_out_and_grads(q, k, v, dy, keep, keep_prob, scale):
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, scale, keep=keep.double(), keep_prob=keep_prob)[0]
    return out.detach(), torch.autograd.grad(out, leaves, dy.double())


def test_the_op_applies_the_mask_of_its_seed_offset_forward_and_grad():
    # 1 * 2 * 90 * 100 = 18000 elements: the mask spans two generator chunks
    b, n, sq, skv, d, kp, scale = 1, 2, 90, 100, 8, 0.8, 0.3
    q, k, v, dy = _rand(b, n, sq, d), _rand(b, n, skv, d, seed=1), _rand(b, n, skv, d, seed=2), \
        _rand(b, n, sq, d, seed=3)
    bits = gen_mask(q, [b, n, sq, skv], 1 - kp, 77, 12)
    keep = _unpack(bits, b * n * sq * skv).view(b, n, sq, skv)
    want, want_grads = _golden_out_and_grads(q, k, v, dy, keep, kp, scale)
    out, smax, ssum, _, seed, offset, numels = na.npu_fusion_attention(
        q, k, v, n, "BNSD", keep_prob=kp, scale=scale, seed=77, offset=12)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    grads = na.npu_fusion_attention_grad(
        q, k, v, dy, n, "BNSD", softmax_max=smax, softmax_sum=ssum, attention_in=out,
        scale_value=scale, keep_prob=kp, seed=seed, offset=offset, numels=numels)
    for got, ref in zip(grads[:3], want_grads):
        torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)


def test_tnd_mask_is_the_flat_per_sequence_order():
    q_lens, kv_lens, n, kp = [2, 3], [3, 4], 2, 0.6
    q, k, v = _rand(5, n, 4), _rand(7, n, 4, seed=1), _rand(7, n, 4, seed=2)
    numels = n * (2 * 3 + 3 * 4)
    keep = _unpack(gen_mask(q, [numels], 1 - kp, 5, 1), numels)
    out = na.npu_fusion_attention(q, k, v, n, "TND", keep_prob=kp, seed=5, offset=1,
                                  actual_seq_qlen=[2, 5], actual_seq_kvlen=[3, 7])[0]
    start, qs, ks = 0, 0, 0
    for a, c in zip(q_lens, kv_lens):
        to4 = lambda t: t.double().permute(1, 0, 2).unsqueeze(0)
        piece = keep[start:start + n * a * c].view(1, n, a, c)
        want = attention(to4(q[qs:qs + a]), to4(k[ks:ks + c]), to4(v[ks:ks + c]), 1.0,
                         keep=piece.double(), keep_prob=kp)[0][0].permute(1, 0, 2)
        torch.testing.assert_close(out[qs:qs + a].double(), want, atol=2e-5, rtol=2e-5)
        start, qs, ks = start + n * a * c, qs + a, ks + c


def test_after_manual_seed_the_op_draws_that_seed_with_offset_zero():
    b, n, s, d, kp = 1, 2, 9, 4, 0.7
    q = _rand(b, n, s, d)
    torch.manual_seed(1234)
    first = na.npu_fusion_attention(q, q, q, n, "BNSD", keep_prob=kp)
    second = na.npu_fusion_attention(q, q, q, n, "BNSD", keep_prob=kp)
    assert first[4:6] == (1234, 0)
    assert second[4] == 1234 and second[5] != 0          # a fresh mask for the next call
    assert not torch.equal(first[0], second[0])
    keep = _unpack(gen_mask(q, [b, n, s, s], 1 - kp, 1234, 0), b * n * s * s).view(b, n, s, s)
    want = attention(*(q.double(),) * 3, 1.0, keep=keep.double(), keep_prob=kp)[0]
    torch.testing.assert_close(first[0].double(), want, atol=2e-5, rtol=2e-5)
    torch.manual_seed(1234)
    again = na.npu_fusion_attention(q, q, q, n, "BNSD", keep_prob=kp)
    assert again[4:6] == (1234, 0) and torch.equal(again[0], first[0])


def test_fake_tensor_shape_and_bad_inputs():
    with FakeTensorMode():
        out = gen_mask(torch.empty(3), [2, 4, 33, 65], 0.1, 1, 0)
    assert out.shape == ((2 * 4 * 33 * 65 + 127) // 128 * 16,) and out.dtype == torch.uint8
    with pytest.raises(ValueError, match=r"_npu_dropout_gen_mask: expected p in \[0, 1\]"):
        na._npu_dropout_gen_mask(torch.empty(1), [4], -0.1, 1, 0)


def test_v3_draws_like_v1_after_manual_seed():
    b, n, s, d, kp = 1, 2, 6, 4, 0.5
    q = _rand(b, n, s, d)
    torch.manual_seed(99)
    out, _, _, _, seed, offset = na.npu_fusion_attention_v3(q, q, q, n, "BNSD", keep_prob=kp)
    assert (seed.item(), offset.item()) == (99, 0)
    keep = _unpack(gen_mask(q, [b, n, s, s], 1 - kp, 99, 0), b * n * s * s).view(b, n, s, s)
    want = attention(*(q.double(),) * 3, 1.0, keep=keep.double(), keep_prob=kp)[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_a_64_bit_generator_seed_is_returned_as_its_low_63_bits():
    q = _rand(1, 1, 3, 4)
    torch.manual_seed(2 ** 64 - 5)
    res = na.npu_fusion_attention(q, q, q, 1, "BNSD", keep_prob=0.5)
    assert res[4:6] == (2 ** 63 - 5, 0)


def test_generator_seed_zero_gets_a_drawn_offset_that_regenerates_the_mask():
    q = _rand(1, 2, 5, 4)
    torch.manual_seed(0)
    res = na.npu_fusion_attention(q, q, q, 2, "BNSD", keep_prob=0.5)
    assert res[4] == 0 and res[5] != 0          # (0, 0) would mean "draw" when passed back
    again = na.npu_fusion_attention(q, q, q, 2, "BNSD", keep_prob=0.5, seed=0, offset=res[5])
    assert torch.equal(res[0], again[0])
