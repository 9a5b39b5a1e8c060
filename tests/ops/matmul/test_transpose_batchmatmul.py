"""npu_transpose_batchmatmul against float64 goldens written from the doc's formula.

``Y = (input^T1 @ weight^T2)^Ty`` with explicit index loops over einsum strings (not our
permutes), the scale path decoded from the npu_trans_quant_param word's bit fields here, and the
batch_split_factor layout of op-plugin's CPU golden (reshape (M, f, -1), swap the first two).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

OP = "npu_transpose_batchmatmul"
TOL = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7, torch.float32: 1e-6}


def _golden(x1, x2, perm_x1, perm_x2):
    """[M, B, N] in float64 from input / weight in their stored layouts."""
    a, b = x1.double(), x2.double()
    lhs = "bmk" if perm_x1 == [0, 1, 2] else "mbk"
    rhs = "bkn" if perm_x2 == [0, 1, 2] else "bnk"
    return torch.einsum(f"{lhs},{rhs}->mbn", a, b)


def _word_fields(word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp19 scale, int9 offset) of npu_trans_quant_param words: bits 13..31 and 37..45."""
    w = word.numpy().astype(np.int64)
    bits = (w & 0xFFFFE000).astype(np.uint32)
    off = (w >> 37) & 0x1FF
    off = np.where(off >= 256, off - 512, off)
    return (torch.from_numpy(bits.view(np.float32).astype(np.float64)),
            torch.from_numpy(off.astype(np.float64)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("perm_x1", [[1, 0, 2], [0, 1, 2]])
def test_matches_formula(dtype, perm_x1):
    m, b, k, n = 5, 3, 48, 32                       # odd M and B
    shape1 = (m, b, k) if perm_x1 == [1, 0, 2] else (b, m, k)
    x1, x2 = torch.randn(shape1).to(dtype), torch.randn(b, k, n).to(dtype)
    before = (x1.clone(), x2.clone())
    out = npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=perm_x1, perm_y=[1, 0, 2])
    golden = _golden(x1, x2, perm_x1, [0, 1, 2])
    assert out.dtype == dtype and out.shape == (m, b, n)
    torch.testing.assert_close(out.double(), golden, rtol=TOL[dtype], atol=TOL[dtype] * 8)
    assert torch.equal(x1, before[0]) and torch.equal(x2, before[1])


def test_weight_stored_n_by_k_with_perm_x2():
    m, b, k, n = 3, 2, 16, 48
    x1, x2 = torch.randn(m, b, k).half(), torch.randn(b, n, k).half()
    out = npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=[1, 0, 2], perm_x2=[0, 2, 1])
    torch.testing.assert_close(out.double(), _golden(x1, x2, [1, 0, 2], [0, 2, 1]),
                               rtol=2 ** -10, atol=2 ** -7)


def test_defaults_and_non_contiguous_inputs():
    m, b, k, n = 7, 3, 32, 16
    x1 = torch.randn(m, b, k).transpose(0, 1)           # a [B, M, K] strided view
    x2 = torch.randn(b, n, k).transpose(1, 2)           # a [B, K, N] strided view
    assert not x1.is_contiguous() and not x2.is_contiguous()
    out = torch.ops.npu.npu_transpose_batchmatmul(x1, x2)
    torch.testing.assert_close(out.double(), _golden(x1, x2, [0, 1, 2], [0, 1, 2]),
                               rtol=1e-6, atol=1e-5)


def test_scale_quantizes_to_int8_bit_exact():
    # Integer-valued float16 inputs and scales that are multiples of 2**-6: the float32
    # accumulator, its product with the scale and the offset are exact (ties at .5 included),
    # so every int8 must match the golden.
    m, b, k, n = 5, 3, 32, 16
    x1 = torch.randint(-6, 7, (m, b, k)).half()
    x2 = torch.randint(-6, 7, (b, k, n)).half()
    raw = torch.randint(1, 64, (b * n,)) / 64
    offset = torch.randint(-20, 21, (b * n,)).float()
    word = npu_anywhere.npu_trans_quant_param(raw, offset, round_mode=1)
    out = npu_anywhere.npu_transpose_batchmatmul(x1, x2, scale=word, perm_x1=[1, 0, 2])
    s, off = _word_fields(word)
    acc = _golden(x1, x2, [1, 0, 2], [0, 1, 2]).reshape(m, b * n)
    golden = torch.round(acc * s + off).clamp(-128, 127).reshape(m, 1, b * n)
    assert out.dtype == torch.int8 and out.shape == (m, 1, b * n)
    assert torch.equal(out.double(), golden)
    assert (golden.abs() == 128).any() or (golden == 127).any()    # saturation exercised


def test_uint64_scale_words_equal_int64():
    m, b, k, n = 2, 2, 16, 16
    x1, x2 = torch.randn(m, b, k).half(), torch.randn(b, k, n).half()
    word = npu_anywhere.npu_trans_quant_param(torch.rand(b * n) * 0.5, round_mode=1)
    a = npu_anywhere.npu_transpose_batchmatmul(x1, x2, scale=word, perm_x1=[1, 0, 2])
    c = npu_anywhere.npu_transpose_batchmatmul(x1, x2, scale=word.view(torch.uint64),
                                               perm_x1=[1, 0, 2])
    assert torch.equal(a, c)


@pytest.mark.parametrize("factor", [2, 4, 3])
def test_batch_split_factor_layout(factor):
    m, b, k, n = 5, 6, 16, 32              # 2 divides B and N; 4 only N; 3 only B
    x1, x2 = torch.randn(m, b, k), torch.randn(b, k, n)
    out = npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=[1, 0, 2],
                                                 batch_split_factor=factor)
    y = _golden(x1, x2, [1, 0, 2], [0, 1, 2]).reshape(m, b * n)
    golden = torch.stack([y[:, i * (b * n // factor):(i + 1) * (b * n // factor)]
                          for i in range(factor)])
    assert out.shape == (factor, m, b * n // factor) and out.is_contiguous()
    torch.testing.assert_close(out.double(), golden, rtol=1e-6, atol=1e-5)


def _x(*shape, dtype=torch.float16):
    return torch.randn(*shape).to(dtype)


BAD = [
    ("perm_x1", (_x(4, 2, 16), _x(2, 16, 16)), {"perm_x1": [1, 1, 2]}, ValueError,
     "expected perm_x1 [0, 1, 2] or [1, 0, 2]"),
    ("perm_x2", (_x(4, 2, 16), _x(2, 16, 16)), {"perm_x2": [1, 0, 2]}, ValueError,
     "expected perm_x2 [0, 1, 2] or [0, 2, 1]"),
    ("perm_y", (_x(4, 2, 16), _x(2, 16, 16)), {"perm_y": [0, 1, 2]}, ValueError,
     "expected perm_y [1, 0, 2]"),
    ("int_input", (torch.zeros(4, 2, 16, dtype=torch.int64), _x(2, 16, 16)), {}, TypeError,
     "expected input dtype in"),
    ("mixed_dtypes", (_x(4, 2, 16), _x(2, 16, 16, dtype=torch.bfloat16)), {}, TypeError,
     "expected weight the same dtype as input"),
    ("two_dims", (_x(4, 16), _x(16, 16)), {}, ValueError, "expected input a 3-D tensor"),
    ("bias", (_x(4, 2, 16), _x(4, 16, 16)), {"bias": _x(16)}, ValueError,
     "expected bias None"),
    ("k_mismatch", (_x(2, 4, 32), _x(2, 16, 16)), {}, RuntimeError,
     "expected weight a reduce (k) dim equal to input's (32)"),
    ("batch_mismatch", (_x(4, 2, 16), _x(3, 16, 16)), {"perm_x1": [1, 0, 2]}, RuntimeError,
     "expected weight a batch dim equal to input's (2)"),
    ("k_alignment", (_x(2, 4, 24), _x(2, 24, 16)), {}, ValueError,
     "expected input a k dim divisible by 16"),
    ("n_alignment", (_x(2, 4, 16), _x(2, 16, 24)), {}, ValueError,
     "expected weight an n dim divisible by 16"),
    ("b_times_k", (_x(4, 64, 1024), _x(64, 1024, 16)), {"perm_x1": [1, 0, 2]}, ValueError,
     "expected input B * K < 65536"),
    ("split_factor", (_x(2, 4, 16), _x(2, 16, 16)), {"batch_split_factor": 5}, ValueError,
     "expected batch_split_factor a divisor of B (2) or N (16)"),
    ("split_factor_zero", (_x(2, 4, 16), _x(2, 16, 16)), {"batch_split_factor": 0}, ValueError,
     "expected batch_split_factor a divisor"),
    ("scale_size", (_x(4, 2, 16), _x(2, 16, 16)),
     {"perm_x1": [1, 0, 2], "scale": torch.zeros(16, dtype=torch.int64)}, ValueError,
     "expected scale a 1-D tensor of size B * N (32)"),
    ("scale_float", (_x(4, 2, 16), _x(2, 16, 16)),
     {"perm_x1": [1, 0, 2], "scale": torch.rand(32)}, TypeError, "expected scale dtype in"),
    ("scale_bf16_input", (_x(4, 2, 16, dtype=torch.bfloat16), _x(2, 16, 16,
                                                                 dtype=torch.bfloat16)),
     {"perm_x1": [1, 0, 2], "scale": torch.zeros(32, dtype=torch.int64)}, TypeError,
     "expected input float16 when scale is given"),
    ("scale_split", (_x(4, 2, 16), _x(2, 16, 16)),
     {"perm_x1": [1, 0, 2], "scale": torch.zeros(32, dtype=torch.int64),
      "batch_split_factor": 2}, ValueError, "expected batch_split_factor 1 when scale"),
]


@pytest.mark.parametrize("args,kwargs,error,match", [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_inputs(args, kwargs, error, match):
    for fn in (npu_anywhere.npu_transpose_batchmatmul, torch.ops.npu.npu_transpose_batchmatmul):
        with pytest.raises(error, match=re.escape(f"{OP}: {match}")):
            fn(*args, **kwargs)


def test_strict_mode_rules():
    x1, x2 = _x(3, 2, 16), _x(2, 16, 16)
    with targets.strict("A2"):
        npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=[1, 0, 2])
        with pytest.raises(ValueError, match=r"expected perm_x2 \[0, 1, 2\] on A2"):
            npu_anywhere.npu_transpose_batchmatmul(x1, _x(2, 16, 16), perm_x1=[1, 0, 2],
                                                   perm_x2=[0, 2, 1])
        with pytest.raises(TypeError, match="expected input float16, bfloat16 or float32"):
            npu_anywhere.npu_transpose_batchmatmul(x1.double(), x2.double(),
                                                   perm_x1=[1, 0, 2])
    with targets.strict("950"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=[1, 0, 2])


def test_no_autograd():
    x1 = torch.randn(3, 2, 16, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward"):
        torch.ops.npu.npu_transpose_batchmatmul(x1, torch.randn(2, 16, 16, dtype=torch.float64),
                                                perm_x1=[1, 0, 2]).sum().backward()
