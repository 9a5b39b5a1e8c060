"""npu_hans_encode / npu_hans_decode: exact round trips, the pdf counts, the documented sizes."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na

N = 32768                      # the smallest documented input
_INT = {2: torch.int16, 4: torch.int32}


def _bits(t):
    return t.contiguous().view(_INT[t.element_size()]).reshape(-1)


def _buffers(x, fixed=N, var=N):
    esize = x.element_size()
    return dict(pdf=torch.zeros(1, 256, dtype=torch.int32),
                mantissa=torch.zeros(x.numel() * (esize - 1) // esize, dtype=x.dtype),
                fixed=torch.zeros(fixed, dtype=x.dtype), var=torch.zeros(var, dtype=x.dtype))


def _specials(x):
    x.view(-1)[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0,
                                   1e-30]).to(x.dtype)
    return x


def _exponent_byte_golden(x):
    """float32 / bfloat16: the exponent field; float16: the 8 bits below the sign."""
    width = 8 * x.element_size()
    out = []
    for v in _bits(x).tolist():
        u = v & ((1 << width) - 1)
        out.append((u >> (width - 9)) & 0xFF)
    return torch.bincount(torch.tensor(out), minlength=256).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reshuff", [False, True])
def test_round_trip_is_bit_exact(dtype, reshuff):
    x = _specials(torch.randn(64, 512).to(dtype))
    before = x.clone()
    bufs = _buffers(x, fixed=N * (2 if reshuff else 1))
    var_before = bufs["var"].clone()
    pdf, mantissa, fixed, var = na.npu_hans_encode(x, True, reshuff, **bufs)
    assert pdf is bufs["pdf"] and fixed is bufs["fixed"] and var is bufs["var"]
    assert torch.equal(pdf[0], _exponent_byte_golden(x)) and int(pdf.sum()) == N
    if reshuff:
        assert torch.equal(var, var_before)          # reshuff: everything sits in fixed
    out = torch.zeros(128, 256, dtype=dtype)          # any shape of the right size
    got = na.npu_hans_decode(mantissa, fixed, var, pdf, reshuff, out=out)
    assert got is out and torch.equal(_bits(out), _bits(x))
    assert torch.equal(_bits(x), _bits(before))


def test_compresses_and_uses_the_given_pdf():
    x = torch.randn(N)
    pdf, mantissa, fixed, var = na.npu_hans_encode(x, True, False, **_buffers(x, var=N))
    lengths = fixed.view(torch.uint8)[16:16 + N // 64]
    assert int(lengths.to(torch.int64).sum()) < N // 2   # randn exponents: < 4 bits per byte
    y = torch.randn(N) * 100                          # coded with x's table (statistic False)
    bufs = _buffers(y)
    bufs["pdf"].copy_(pdf)
    p2, m2, f2, v2 = na.npu_hans_encode(y, False, False, **bufs)
    assert torch.equal(p2, pdf)
    assert torch.equal(na.npu_hans_decode(m2, f2, v2, p2, out=torch.zeros(N)), y)
    z = torch.randn(N)                                # an all-zero pdf: every byte codable
    p3, m3, f3, v3 = na.npu_hans_encode(z, False, False, **_buffers(z))
    assert torch.equal(na.npu_hans_decode(m3, f3, v3, p3, out=torch.zeros(N)), z)


def test_blocks_that_coding_would_not_shrink_are_kept_raw():
    y = torch.ones(N)
    gen = torch.Generator().manual_seed(3)
    noise = torch.randint(-2 ** 31, 2 ** 31 - 1, (N // 2,), generator=gen, dtype=torch.int64)
    y[N // 2:] = noise.to(torch.int32).view(torch.float32)   # every bit pattern, NaNs too
    pdf, mantissa, fixed, var = na.npu_hans_encode(y, True, False, **_buffers(y))
    lengths = fixed.view(torch.uint8)[16:16 + N // 64]
    assert int((lengths[N // 128:] == 255).sum()) == N // 128    # the noise blocks: raw
    assert int((lengths[:N // 128] == 255).sum()) == 0
    out = na.npu_hans_decode(mantissa, fixed, var, pdf, out=torch.zeros(N))
    assert torch.equal(_bits(out), _bits(y))


def test_non_contiguous_input_and_buffers_and_default_buffers():
    base = torch.randn(256, 128)
    x = base.t()                                      # non-contiguous input
    bufs = _buffers(x)
    bufs["fixed"] = torch.zeros(2, N // 2)[0]         # a row: contiguous; var a strided view
    bufs["var"] = torch.zeros(N, 2)[:, 1]
    pdf, mantissa, fixed, var = na.npu_hans_encode(x, True, False, **bufs)
    out = torch.zeros(2 * x.numel())[::2]
    na.npu_hans_decode(mantissa, fixed, var, pdf, False, out=out)
    assert torch.equal(out, x.reshape(-1))
    pdf, mantissa, fixed, var = na.npu_hans_encode(base)   # out omitted: the doc's sizes
    assert pdf.shape == (1, 256) and fixed.numel() == var.numel() == base.numel()


def _raises_everywhere(op_name, error, match, args, kwargs):
    op = getattr(getattr(torch.ops, na.library.TORCH_NPU_NS), op_name).out
    with pytest.raises(error, match=match):
        getattr(na, op_name)(*args, **kwargs)
    with pytest.raises(error, match=match):
        op(*args, **kwargs)
    with FakeTensorMode() as mode:
        def fake(v):
            return mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
        with pytest.raises(error, match=match):
            op(*[fake(a) for a in args], **{k: fake(v) for k, v in kwargs.items()})


def test_errors_before_any_write():
    x = torch.randn(N, dtype=torch.float16)
    bufs = _buffers(x, fixed=100, var=N)
    snapshot = {k: v.clone() for k, v in bufs.items()}
    _raises_everywhere("npu_hans_encode", RuntimeError,
                       "npu_hans_encode: expected fixed at least 512 bytes", (x, True), bufs)
    small = _buffers(x, fixed=N // 4, var=N // 4)     # float16: 2 bytes an element
    _raises_everywhere("npu_hans_encode", RuntimeError,
                       "npu_hans_encode: expected fixed and var at least 33296 bytes",
                       (x, True), small)
    _raises_everywhere("npu_hans_encode", RuntimeError,
                       "npu_hans_encode: expected fixed at least 33296 bytes with reshuff",
                       (x, True, True), _buffers(x, fixed=N // 4))
    wrong = dict(_buffers(x), mantissa=torch.zeros(N + 2, dtype=torch.float16))
    _raises_everywhere("npu_hans_encode", RuntimeError,
                       "npu_hans_encode: expected mantissa numel [*] .element_size - 1. = "
                       "32768 bytes", (x, True), wrong)
    for k, v in bufs.items():
        assert torch.equal(v, snapshot[k])
    pdf, mantissa, fixed, var = na.npu_hans_encode(x, True, False, **_buffers(x))
    _raises_everywhere("npu_hans_decode", ValueError,
                       "npu_hans_decode: expected out a multiple of 64 elements",
                       (mantissa, fixed, var, pdf), {"out": torch.zeros(100, dtype=x.dtype)})
    out = torch.full((N,), 7.0, dtype=x.dtype)
    with pytest.raises(ValueError, match=r"npu_hans_decode: expected reshuff the value the "
                                         r"encode used \(False\)"):
        na.npu_hans_decode(mantissa, fixed, var, pdf, True, out=out)
    broken = fixed.clone()
    broken.view(torch.uint8)[0] = 0
    with pytest.raises(ValueError, match="npu_hans_decode: expected fixed a stream written"):
        na.npu_hans_decode(mantissa, broken, var, pdf, out=out)
    assert torch.equal(out, torch.full((N,), 7.0, dtype=x.dtype))
    with pytest.raises(TypeError, match="npu_hans_decode: expected out a tensor"):
        na.npu_hans_decode(mantissa, fixed, var, pdf)
