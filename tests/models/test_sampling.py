"""Greedy / top-k / top-p sampling of npu_anywhere.models.scheduler."""

import torch

from npu_anywhere.models.scheduler import sample_next


def logits():
    # probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (log-probs as logits), shuffled columns
    p = torch.tensor([0.0625, 0.5, 0.125, 0.0625, 0.25])
    return p.log().repeat(64, 1)


def test_temperature_zero_is_argmax():
    assert sample_next(logits()).tolist() == [1] * 64


def test_top_k_keeps_only_the_k_largest():
    g = torch.Generator().manual_seed(0)
    draws = sample_next(logits().repeat(8, 1), temperature=1.0, top_k=2, generator=g)
    assert set(draws.tolist()) == {1, 4}
    assert sample_next(logits(), temperature=1.0, top_k=1).tolist() == [1] * 64


def test_top_p_keeps_the_smallest_set_reaching_p():
    g = torch.Generator().manual_seed(0)
    # 0.5 + 0.25 = 0.75 reaches 0.7: tokens 1 and 4 only; 0.76 needs the 0.125 one too.
    draws = sample_next(logits().repeat(8, 1), temperature=1.0, top_p=0.7, generator=g)
    assert set(draws.tolist()) == {1, 4}
    draws = sample_next(logits().repeat(8, 1), temperature=1.0, top_p=0.76, generator=g)
    assert set(draws.tolist()) == {1, 4, 2}
    # A tiny p still keeps the most likely token.
    assert sample_next(logits(), temperature=1.0, top_p=1e-6).tolist() == [1] * 64
