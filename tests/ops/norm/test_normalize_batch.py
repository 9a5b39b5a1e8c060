"""npu_normalize_batch against a float64 golden looping over the batch as op-plugin's CPU
golden does (test/test_v2r2_ops/test_normalize_batch.py)::

    frames = x[i, :, :seq_len[i]]
    0 per_feature:  mean/std over the frames per feature;   1 all_features: over everything
    std unbiased;  out[i] = (x[i] - mean) / (std + 1e-5)      for all frames
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

I32, F32, F64 = torch.int32, torch.float32, torch.float64


def golden(x, seq_len, normalize_type):
    x = x.double()
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        frames = x[i, :, :int(seq_len[i])]
        if normalize_type == 0:
            mean = frames.mean(dim=1, keepdim=True)
            std = frames.std(dim=1, keepdim=True)
        else:
            mean, std = frames.mean(), frames.std()
        out[i] = (x[i] - mean) / (std + 1e-5)
    return out


def inputs(n=3, c=4, d=9, lengths=(3, 9, 5), seed=0, dtype=F32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, c, d, generator=g, dtype=F64) * 9 + 1).to(dtype)
    return x, torch.tensor(lengths, dtype=I32)


@pytest.mark.parametrize("normalize_type", [0, 1])
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("n,c,d,lengths", [(3, 4, 9, (3, 9, 5)), (1, 1, 5, (4,)),
                                           (2, 6, 1000, (700, 13))])
def test_matches_golden(n, c, d, lengths, dtype, normalize_type):
    x, seq_len = inputs(n, c, d, lengths, seed=d, dtype=dtype)
    x0, s0 = x.clone(), seq_len.clone()
    out = na.npu_normalize_batch(x, seq_len, normalize_type)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_golden(out, golden(x, seq_len, normalize_type), dtype=dtype,
                           rtol=2e-5 if dtype == F32 else None, atol=1e-5)
    assert torch.equal(x, x0) and torch.equal(seq_len, s0)


def test_frames_past_seq_len_use_the_same_statistics():
    x, seq_len = inputs(lengths=(2, 3, 4))
    out = na.npu_normalize_batch(x, seq_len)
    want = golden(x, seq_len, 0)
    assert_close_to_golden(out[:, :, 5:], want[:, :, 5:], rtol=2e-5, atol=1e-5)
    assert (out[:, :, 5:].abs() > 0).all()


def test_types_differ_and_default_is_per_feature():
    x, seq_len = inputs(seed=3)
    per_feature = na.npu_normalize_batch(x, seq_len)
    assert torch.equal(per_feature, na.npu_normalize_batch(x, seq_len, 0))
    assert not torch.allclose(per_feature, na.npu_normalize_batch(x, seq_len, 1))


def test_length_longer_than_d_is_clamped_and_one_frame_gives_nan():
    x, _ = inputs(n=2, d=6, seed=4)
    out = na.npu_normalize_batch(x, torch.tensor([50, 1], dtype=I32))
    assert_close_to_golden(out[0], golden(x, [6, 6], 0)[0], rtol=2e-5, atol=1e-5)
    assert torch.isnan(out[1]).all()                    # unbiased std of one value


def test_values_past_seq_len_do_not_enter_the_statistics():
    x, seq_len = inputs(lengths=(3, 9, 5), seed=5)
    x[0, :, 4] = float("nan")
    x[2, 1, 7] = float("inf")
    out = na.npu_normalize_batch(x, seq_len, 1)
    want = golden(x, seq_len, 1)
    assert torch.isnan(out[0, :, 4]).all() and torch.isnan(want[0, :, 4]).all()
    keep = torch.isfinite(want)
    assert_close_to_golden(out[keep], want[keep], rtol=2e-5, atol=1e-5)
    assert torch.isfinite(out[0, :, :4]).all()


def test_doc_example_shapes():
    import numpy as np
    a = np.random.uniform(1, 10, (2, 3, 6)).astype(np.float32)
    b = np.random.uniform(3, 6, (2)).astype(np.int32)
    x, seqlen = torch.from_numpy(a), torch.from_numpy(b)
    out = na.npu_normalize_batch(x, seqlen, 0)
    assert_close_to_golden(out, golden(x, seqlen, 0), rtol=2e-5, atol=1e-5)


def test_no_autograd():
    x, seq_len = inputs(dtype=F64)
    with pytest.raises(RuntimeError, match="npu_normalize_batch: expected inputs that do not"):
        na.npu_normalize_batch(x.requires_grad_(True), seq_len)


@pytest.mark.parametrize("args,error,match", [
    ((torch.rand(3, 4, 7), torch.tensor([3, 4, 5], dtype=I32), 2), ValueError,
     "expected normalize_type one of \\[0, 1\\]"),
    ((torch.rand(3, 4, 7), torch.tensor([3, 4, 5])), TypeError, "expected seq_len dtype in"),
    ((torch.rand(3, 4, 7, dtype=torch.float16), torch.tensor([3, 4, 5], dtype=I32)), TypeError,
     "expected self dtype in"),
    ((torch.rand(3, 4), torch.tensor([3, 4, 5], dtype=I32)), ValueError,
     "expected self a 3-D tensor"),
    ((torch.rand(3, 4, 7), torch.tensor([[3, 4, 5]], dtype=I32)), ValueError,
     "expected seq_len a 1-D tensor"),
    ((torch.rand(3, 4, 7), torch.tensor([3, 4], dtype=I32)), RuntimeError,
     "expected seq_len one length per batch item"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_normalize_batch: " + match):
        na.npu_normalize_batch(*args)


def test_strict_rejects_float64():
    x, seq_len = inputs(dtype=F64)
    with na.strict("A2"), pytest.raises(TypeError, match="expected self dtype in"):
        na.npu_normalize_batch(x, seq_len)
