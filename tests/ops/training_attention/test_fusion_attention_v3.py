"""npu_fusion_attention_v3 / npu_fusion_attention_grad_v3: the graph-mode forms (seed 004).

v3 is v1 with tensor lengths and tensor seed / offset outputs, so it is checked against the
float64 golden once and against v1 (same seed) for dropout, TND and gradients.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from fa_golden import attention, visible

TRIU = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 31 * len(shape) + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def test_outputs_are_six_tensors_and_match_the_golden():
    q, k, v = _rand(2, 4, 6, 8), _rand(2, 2, 6, 8, seed=1), _rand(2, 2, 6, 8, seed=2)
    out = na.npu_fusion_attention_v3(q, k, v, 4, "BNSD", atten_mask=TRIU, sparse_mode=3,
                                     scale=0.4)
    assert len(out) == 6 and all(isinstance(t, torch.Tensor) for t in out)
    assert out[4].shape == (1,) and out[4].dtype == torch.int64 and int(out[4]) == 0
    want = attention(q.double(), k.double(), v.double(), 0.4, vis=visible(3, 6, 6))[0]
    torch.testing.assert_close(out[0].double(), want, atol=2e-5, rtol=2e-5)
    assert out[1].shape == (2, 4, 6, 8) and out[1].dtype == torch.float32


def test_tnd_dropout_equals_v1_with_the_returned_seed_and_grads_agree():
    q = _rand(5, 2, 4).requires_grad_()
    k = _rand(7, 1, 4, seed=1).requires_grad_()
    v = _rand(7, 1, 4, seed=2).requires_grad_()
    lens = dict(atten_mask=TRIU, sparse_mode=3, keep_prob=0.6)
    out3 = na.npu_fusion_attention_v3(q, k, v, 2, "TND", actual_seq_qlen=torch.tensor([2, 5]),
                                      actual_seq_kvlen=torch.tensor([3, 7]), **lens)
    seed, offset = int(out3[4]), int(out3[5])
    assert (seed, offset) != (0, 0)          # a drawn mask (seed 0 only after manual_seed(0))
    dy = _rand(5, 2, 4, seed=3)
    g3 = torch.autograd.grad(out3[0], (q, k, v), dy)
    out1 = na.npu_fusion_attention(q, k, v, 2, "TND", actual_seq_qlen=[2, 5],
                                   actual_seq_kvlen=[3, 7], seed=seed, offset=offset, **lens)
    g1 = torch.autograd.grad(out1[0], (q, k, v), dy)
    assert torch.equal(out3[0], out1[0])
    for a, b in zip(g3, g1):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_gradcheck_sbh_gqa_pse():
    q = _rand(3, 1, 4 * 2, dtype=torch.float64).requires_grad_()
    k = _rand(4, 1, 2 * 2, dtype=torch.float64, seed=1).requires_grad_()
    v = _rand(4, 1, 2 * 2, dtype=torch.float64, seed=2).requires_grad_()
    pse = _rand(1, 4, 1, 4, dtype=torch.float64, seed=3).requires_grad_()

    def f(q, k, v, pse):
        return na.npu_fusion_attention_v3(q, k, v, 4, "SBH", pse=pse, scale=0.5)[0]
    assert torch.autograd.gradcheck(f, (q, k, v, pse), fast_mode=True)


def test_fake_tensor_lengths_give_the_shapes_without_values():
    mode = FakeTensorMode()
    with mode:
        q, k = torch.empty(9, 4, 8), torch.empty(11, 2, 8)
        cq, ck = torch.empty(3, dtype=torch.int64), torch.empty(3, dtype=torch.int64)
        out = na.npu_fusion_attention_v3(q, k, k, 4, "TND", actual_seq_qlen=cq,
                                         actual_seq_kvlen=ck, atten_mask=torch.empty(
                                             2048, 2048, dtype=torch.bool), sparse_mode=3)
    assert out[0].shape == (9, 4, 8) and out[1].shape == (9, 4, 8) and out[4].shape == (1,)


def test_grad_v3_takes_tensor_seed_and_offset():
    q, k, v = _rand(1, 2, 5, 4), _rand(1, 2, 5, 4, seed=1), _rand(1, 2, 5, 4, seed=2)
    out, smax, ssum, _, seed, offset = na.npu_fusion_attention_v3(q, k, v, 2, "BNSD",
                                                                 keep_prob=0.8)
    dy = torch.ones_like(out)
    g3 = na.npu_fusion_attention_grad_v3(q, k, v, dy, 2, "BNSD", softmax_max=smax,
                                         softmax_sum=ssum, attention_in=out, keep_prob=0.8,
                                         seed=seed, offset=offset)
    g1 = na.npu_fusion_attention_grad(q, k, v, dy, 2, "BNSD", softmax_max=smax,
                                      softmax_sum=ssum, attention_in=out, keep_prob=0.8,
                                      seed=int(seed), offset=int(offset))
    assert g3[3] is None and g1[3] is None          # no pse: no dpse
    for a, b in zip(g3[:3] + g3[4:], g1[:3] + g1[4:]):
        assert torch.equal(a, b)


def test_bad_length_tensors():
    q = _rand(5, 2, 4)
    with pytest.raises(ValueError, match="npu_fusion_attention_v3: expected actual_seq_qlen to "
                                         "end at the token count"):
        na.npu_fusion_attention_v3(q, q, q, 2, "TND", actual_seq_qlen=torch.tensor([2, 4]),
                                   actual_seq_kvlen=torch.tensor([2, 5]))
    with pytest.raises(TypeError, match="expected actual_seq_qlen a 1-D integer tensor"):
        na.npu_fusion_attention_v3(q, q, q, 2, "TND", actual_seq_qlen=torch.tensor([2., 5.]),
                                   actual_seq_kvlen=torch.tensor([2, 5]))


def test_grad_v3_returns_no_dpse_without_pse_and_dpse_with_it():
    # op-plugin's npu_fusion_attention_backward_v3: an undefined dpse (None) without pse
    q = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    for pse in (None, torch.randn(1, 2, 4, 4, dtype=torch.float64)):
        out, smax, ssum = na.npu_fusion_attention_v3(q, q, q, 2, "BNSD", pse=pse)[:3]
        grads = na.npu_fusion_attention_grad_v3(q, q, q, torch.ones_like(out), 2, "BNSD",
                                                pse=pse, softmax_max=smax, softmax_sum=ssum,
                                                attention_in=out)
        assert (grads[3] is None) == (pse is None)
        assert pse is None or grads[3].shape == pse.shape
        assert grads[4].shape == (0,) and grads[4].dtype == torch.float32
