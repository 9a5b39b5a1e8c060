"""npu_quant_matmul_gelu against float64 goldens written from the doc's formulas.

The int32 accumulation is computed here in float64 (exact for these sizes), int4 words are
unpacked with explicit shifts, and GELU is written out (erf form and tanh form).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

OP = "npu_quant_matmul_gelu"
TOL = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}


def _i8(*shape, lo=-128, hi=128):
    return torch.randint(lo, hi, shape, dtype=torch.int8)


def _gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    if approximate == "gelu_tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.special.erf(x / math.sqrt(2)))


def _golden(x1, x2, x1_scale, x2_scale, bias=None, approximate="gelu_erf"):
    acc = x1.double() @ x2.double()
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.double()
    v = acc * x2_scale.double() * x1_scale.double()[:, None]
    if bias is not None and bias.dtype != torch.int32:
        v = v + bias.double()
    return _gelu(v, approximate)


def _unpack_int4(words: torch.Tensor) -> torch.Tensor:
    """int32 words -> int4 values along the last dim, word bits 4j..4j+3 being element j."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    nib = torch.stack([(w >> (4 * j)) & 0xF for j in range(8)], dim=-1)
    nib = nib.reshape(*words.shape[:-1], words.shape[-1] * 8)
    return torch.where(nib >= 8, nib - 16, nib)


def _words(*shape):
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=torch.int32)


def _close(out, golden):
    tol = TOL[out.dtype]
    torch.testing.assert_close(out.double(), golden, rtol=tol, atol=tol * 4)


BIASES = {
    "none": lambda n: None,
    "int32": lambda n: torch.randint(-3000, 3000, (n,), dtype=torch.int32),
    "float32": lambda n: torch.randn(n),
    "bfloat16": lambda n: torch.randn(n).to(torch.bfloat16),
    "float16": lambda n: torch.randn(n).to(torch.float16),
}


@pytest.mark.parametrize("approximate", ["gelu_erf", "gelu_tanh"])
@pytest.mark.parametrize("bias_kind", list(BIASES))
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
def test_a8w8_matches_formula(approximate, bias_kind, scale_dtype):
    m, k, n = 5, 24, 7
    x1, x2 = _i8(m, k), _i8(k, n)
    x1_scale = torch.rand(m) * 0.02
    x2_scale = (torch.rand(n) * 0.02).to(scale_dtype)
    bias = BIASES[bias_kind](n)
    before = x1.clone(), x2.clone()
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, bias=bias,
                                             approximate=approximate)
    bf16 = scale_dtype == torch.bfloat16 or bias_kind == "bfloat16"
    assert out.dtype == (torch.bfloat16 if bf16 else torch.float16) and out.shape == (m, n)
    golden = _golden(x1, x2, x1_scale, x2_scale, bias, approximate)
    assert (golden < 0).any() and (golden > 1).any()        # both branches of GELU are used
    _close(out, golden)
    assert torch.equal(x1, before[0]) and torch.equal(x2, before[1])


def test_default_is_erf_and_tanh_differs():
    x1, x2 = _i8(4, 16), _i8(16, 8)
    s1, s2 = torch.rand(4) * 0.01, torch.rand(8) * 0.01
    erf = torch.ops.npu.npu_quant_matmul_gelu(x1, x2, s1, s2)
    assert torch.equal(erf, npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2,
                                                               approximate="gelu_erf"))
    _close(erf, _golden(x1, x2, s1, s2))
    tanh = npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2, approximate="gelu_tanh")
    _close(tanh, _golden(x1, x2, s1, s2, approximate="gelu_tanh"))


def test_batch_broadcast_odd_sizes_per_tensor_scale():
    x1, x2 = _i8(2, 1, 5, 17), _i8(3, 17, 9)
    s1, s2 = torch.rand(5) * 0.01, torch.rand(1) * 0.01
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2)
    assert out.shape == (2, 3, 5, 9)
    _close(out, _golden(x1, x2, s1, s2))


def test_transposed_operands_and_3d_bias():
    b, m, k, n = 2, 3, 32, 6
    x1 = _i8(b, k, m).transpose(1, 2)                           # a strided (b, m, k) view
    x2 = _i8(b, n, k).transpose(1, 2)                           # a strided (b, k, n) view
    assert not x1.is_contiguous() and not x2.is_contiguous()
    s1, s2 = torch.rand(m) * 0.01, torch.rand(n) * 0.01
    bias = torch.randn(b, 1, n)
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2, bias=bias, approximate="gelu_tanh")
    _close(out, _golden(x1, x2, s1, s2, bias, "gelu_tanh"))


def test_nz_weight_from_format_cast():
    x1, x2 = _i8(4, 32), _i8(32, 16)
    s1, s2 = torch.rand(4) * 0.01, torch.rand(16) * 0.01
    x2_nz = npu_anywhere.npu_format_cast(x2.contiguous(), 29)
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2_nz, s1, s2, approximate="gelu_tanh")
    _close(out, _golden(x1, x2, s1, s2, approximate="gelu_tanh"))


@pytest.mark.parametrize("layout", ["packed_along_n", "transposed_packed_along_k"])
def test_a4w4_int32_words(layout):
    m, k, n = 3, 32, 16
    x1 = _words(m, k // 8)
    x2 = _words(k, n // 8) if layout == "packed_along_n" else _words(n, k // 8).t()
    v2 = _unpack_int4(x2) if layout == "packed_along_n" else _unpack_int4(x2.t()).t()
    s1, s2 = torch.rand(m) * 0.1, (torch.rand(n) * 0.1).to(torch.bfloat16)
    bias = torch.randint(-50, 50, (n,), dtype=torch.int32)
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2, bias=bias)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    _close(out, _golden(_unpack_int4(x1), v2, s1, s2, bias))


def test_int32_bias_joins_the_exact_accumulator():
    # acc = 4099 * 128 * 128 + 1 is odd and above 2**24, so float32 cannot hold it; the int32
    # bias cancels all but 3 of it.  Only an exact int32 ``acc + bias`` gives qbmm = 3 * 0.5.
    k = 4100
    x1 = torch.full((2, k), -128, dtype=torch.int8)
    x2 = torch.full((k, 3), -128, dtype=torch.int8)
    x1[:, 0] = 1
    x2[0] = 1
    acc = 4099 * 128 * 128 + 1
    bias = torch.full((3,), 3 - acc, dtype=torch.int32)
    s1, s2 = torch.tensor([1.0, 0.25]), torch.full((3,), 0.5)
    out = npu_anywhere.npu_quant_matmul_gelu(x1, x2, s1, s2, bias=bias)
    golden = _gelu(torch.tensor([[1.5], [0.375]], dtype=torch.float64), "gelu_erf").expand(2, 3)
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -11, atol=0)


def _x2(*shape):
    return _i8(*shape)


BAD = [
    ("approximate", ((_i8(3, 8), _x2(8, 4), torch.rand(3), torch.rand(4)),
                     {"approximate": "tanh"}), ValueError,
     "expected approximate 'gelu_tanh' or 'gelu_erf', but got 'tanh'"),
    ("dtype_mismatch", ((_i8(3, 8), _words(8, 4), torch.rand(3), torch.rand(4)), {}),
     TypeError, "expected x2 the dtype of x1"),
    ("float_input", ((torch.randn(3, 8), torch.randn(8, 4), torch.rand(3), torch.rand(4)), {}),
     TypeError, "expected x1 dtype in"),
    ("one_dim", ((_i8(8), _x2(8, 4), torch.rand(3), torch.rand(4)), {}), ValueError,
     "expected x1 a tensor with 2 to 6 dims"),
    ("k_mismatch", ((_i8(3, 8), _x2(9, 4), torch.rand(3), torch.rand(4)), {}), RuntimeError,
     "expected x2 a k dim equal to x1's (8)"),
    ("batch_mismatch", ((_i8(2, 3, 8), _x2(3, 8, 4), torch.rand(3), torch.rand(4)), {}),
     RuntimeError, "expected x2 batch dims broadcastable"),
    ("x1_scale_size", ((_i8(3, 8), _x2(8, 4), torch.rand(4), torch.rand(4)), {}), ValueError,
     "expected x1_scale a 1-D tensor of size m (3)"),
    ("x1_scale_dtype", ((_i8(3, 8), _x2(8, 4), torch.rand(3).half(), torch.rand(4)), {}),
     TypeError, "expected x1_scale dtype in"),
    ("x2_scale_dtype", ((_i8(3, 8), _x2(8, 4), torch.rand(3), torch.rand(4).half()), {}),
     TypeError, "expected x2_scale dtype in"),
    ("x2_scale_size", ((_i8(3, 8), _x2(8, 4), torch.rand(3), torch.rand(3)), {}), ValueError,
     "expected x2_scale a 1-D tensor of size 1 or n (4)"),
    ("bias_shape", ((_i8(3, 8), _x2(8, 4), torch.rand(3), torch.rand(4)),
                    {"bias": torch.randn(1, 4)}), ValueError, "expected bias one of the shapes"),
    ("bias_dtype", ((_i8(3, 8), _x2(8, 4), torch.rand(3), torch.rand(4)),
                    {"bias": torch.zeros(4, dtype=torch.int64)}), TypeError,
     "expected bias dtype in"),
    ("int4_float_bias", ((_words(3, 1), _words(8, 1), torch.rand(3), torch.rand(8)),
                         {"bias": torch.randn(8)}), TypeError,
     "expected bias int32 for int4 (int32) inputs"),
    ("int4_batched_x2", ((_words(3, 1), _words(2, 8, 1), torch.rand(3), torch.rand(8)), {}),
     ValueError, "expected x2 a 2-D tensor for int4 (int32) inputs"),
    ("int4_x1_strided", ((_words(2, 3).t(), _words(16, 1), torch.rand(3), torch.rand(8)), {}),
     ValueError, "expected x1 a contiguous tensor when int4 is packed in int32"),
    ("last_dim", ((_i8(2, 65536), _x2(65536, 2), torch.rand(2), torch.rand(2)), {}),
     ValueError, "expected x1 a last dim <= 65535"),
]


@pytest.mark.parametrize("made,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs(made, error, match):
    args, kwargs = made
    for fn in (npu_anywhere.npu_quant_matmul_gelu, torch.ops.npu.npu_quant_matmul_gelu):
        with pytest.raises(error, match=re.escape(f"{OP}: {match}")):
            fn(*args, **kwargs)


def test_strict_mode_products():
    args = (_i8(3, 8), _i8(8, 4), torch.rand(3), torch.rand(4))
    for product in ("A2", "A3"):
        with targets.strict(product):
            npu_anywhere.npu_quant_matmul_gelu(*args)
    for product in ("950", "310P"):
        with targets.strict(product):
            with pytest.raises(RuntimeError, match="expected a product the op supports"):
                npu_anywhere.npu_quant_matmul_gelu(*args)


def test_no_autograd():
    args = (_i8(3, 8), _i8(8, 4), torch.rand(3, requires_grad=True), torch.rand(4))
    with pytest.raises(RuntimeError, match="no backward"):
        torch.ops.npu.npu_quant_matmul_gelu(*args).float().sum().backward()
