"""npu_random_choice_with_mask: the picks are true elements, without repeats, padded; seeds
repeat; the global generator decides unseeded calls; the subset and order are uniform."""

import collections

import pytest
import torch

import npu_anywhere as na


def test_picks_are_distinct_true_coordinates_then_padding():
    x = torch.rand(4, 3, 5, generator=torch.Generator().manual_seed(0)) > 0.6
    truth = {tuple(c) for c in x.nonzero().tolist()}
    y, mask = na.npu_random_choice_with_mask(x.transpose(0, 2), 64, 5, 6)   # non-contiguous
    assert y.shape == (64, 3) and y.dtype == torch.int32 and mask.dtype == torch.bool
    k = len(truth)
    assert mask.tolist() == [True] * k + [False] * (64 - k)
    picked = [tuple(r[::-1]) for r in y[:k].tolist()]
    assert set(picked) == truth and len(set(picked)) == k and not y[k:].any()
    y2, _ = na.npu_random_choice_with_mask(x, 3)
    assert y2.shape == (3, 3) and all(tuple(r) in truth for r in y2.tolist())


def test_seeds_repeat_and_the_global_generator_decides_unseeded_calls():
    x = torch.ones(40, dtype=torch.bool)
    a = na.npu_random_choice_with_mask(x, 10, 3, 1)[0]
    assert torch.equal(a, na.npu_random_choice_with_mask(x, 10, 3, 1)[0])
    assert not torch.equal(a, na.npu_random_choice_with_mask(x, 10, 4, 1)[0])
    torch.manual_seed(11)
    b = na.npu_random_choice_with_mask(x, 10)[0]
    torch.manual_seed(11)
    assert torch.equal(b, torch.ops.npu.npu_random_choice_with_mask(x, 10)[0])


def test_every_ordered_pick_is_equally_likely():
    x = torch.tensor([True, False, True, True])
    counts = collections.Counter(tuple(na.npu_random_choice_with_mask(x, 2)[0].flatten().tolist())
                                 for _ in range(600))
    assert set(counts) == {(a, b) for a in (0, 2, 3) for b in (0, 2, 3) if a != b}
    assert all(60 < n < 140 for n in counts.values()), counts        # 100 expected each


def test_bad_inputs():
    for args, match in (((torch.ones(3), 2), "expected x dtype in \\['bool'\\]"),
                        ((torch.ones(3, dtype=torch.bool), 0), "expected count > 0"),
                        ((torch.ones((), dtype=torch.bool), 2), "expected x a tensor with 1 to 5")):
        with pytest.raises(RuntimeError, match="npu_random_choice_with_mask: " + match):
            na.npu_random_choice_with_mask(*args)
