"""npu_transpose_quant_batchmatmul against float64 goldens written from the doc's formula.

float8 values are widened by torch (exact), hifloat8 codes are decoded with en_dtypes (the
CANN goldens' hifloat8), e8m0 scales are ``2 ** (bits - 127)`` computed here from the raw bytes,
and the mx sum is written group by group over 32 consecutive k.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

en_dtypes = pytest.importorskip("en_dtypes")

OP = "npu_transpose_quant_batchmatmul"
TOL = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}
E4M3, E5M2, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu


def _f8(*shape, dtype=E4M3):
    return (torch.randn(*shape) * 2).to(dtype)


def _e8m0(*shape, lo=120, hi=134):
    bits = torch.randint(lo, hi, shape, dtype=torch.uint8)
    return bits.view(E8M0), bits


def _close(out, golden):
    tol = TOL[out.dtype]
    torch.testing.assert_close(out.double(), golden, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("fp8", [E4M3, E5M2])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
def test_k_c_per_token_per_channel(fp8, out_dtype):
    m, b, k, n = 3, 2, 512, 128
    x1, x2 = _f8(m, b, k, dtype=fp8), _f8(b, k, n, dtype=fp8)
    s1, s2 = torch.rand(m) * 0.1, torch.rand(n) * 0.1
    out = npu_anywhere.npu_transpose_quant_batchmatmul(
        x1, x2, dtype=out_dtype, x1_scale=s1, x2_scale=s2, perm_x1=[1, 0, 2],
        perm_x2=[0, 1, 2], perm_y=[1, 0, 2])
    golden = torch.einsum("mbk,bkn->mbn", x1.double(), x2.double())
    golden = golden * s2.double() * s1.double()[:, None, None]
    assert out.dtype == out_dtype and out.shape == (m, b, n)
    _close(out, golden)


def test_k_c_non_contiguous_x1_and_dtype_code():
    m, b, k, n = 5, 3, 512, 128
    x1 = _f8(b, m, k).transpose(0, 1)                   # an (m, b, k) strided view
    assert not x1.is_contiguous()
    x2 = _f8(b, k, n)
    s1, s2 = torch.rand(m), torch.rand(n)
    out = torch.ops.npu.npu_transpose_quant_batchmatmul(x1, x2, 5, x1_scale=s1, x2_scale=s2)
    golden = torch.einsum("mbk,bkn->mbn", x1.double(), x2.double()) * s2.double() \
        * s1.double()[:, None, None]
    assert out.dtype == torch.float16
    _close(out, golden)


def _mx_golden(x1, x2, bits1, bits2, x2_nk: bool):
    m, b, k = x1.shape
    a, w = x1.double(), x2.double()
    if x2_nk:
        w = w.transpose(1, 2)                             # (b, k, n)
    sc1 = 2.0 ** (bits1.double() - 127)                   # (m, b, k/64, 2)
    sc2 = 2.0 ** (bits2.double() - 127)                   # (b, k/64, n, 2) or (b, n, k/64, 2)
    out = torch.zeros(m, b, w.shape[-1], dtype=torch.float64)
    for g in range(k // 32):
        blk, half = g // 2, g % 2
        part = torch.einsum("mbk,bkn->mbn", a[:, :, 32 * g:32 * (g + 1)],
                            w[:, 32 * g:32 * (g + 1)])
        s2 = sc2[:, :, blk, half] if x2_nk else sc2[:, blk, :, half]   # (b, n)
        out += part * sc1[:, :, blk, half][..., None] * s2[None]
    return out


@pytest.mark.parametrize("x2_nk", [False, True])
@pytest.mark.parametrize("group_sizes", [[0, 0, 32], [1, 1, 32]])
def test_mx_block_scales(x2_nk, group_sizes):
    m, b, k, n = 3, 2, 128, 5
    x1 = _f8(m, b, k)
    x2 = _f8(b, n, k) if x2_nk else _f8(b, k, n)
    s1, bits1 = _e8m0(m, b, k // 64, 2)
    s2, bits2 = _e8m0(*((b, n, k // 64, 2) if x2_nk else (b, k // 64, n, 2)))
    out = npu_anywhere.npu_transpose_quant_batchmatmul(
        x1, x2, dtype=torch.bfloat16, x1_scale=s1, x2_scale=s2, group_sizes=group_sizes,
        perm_x1=[1, 0, 2], perm_x2=[0, 2, 1] if x2_nk else [0, 1, 2], perm_y=[1, 0, 2])
    assert out.dtype == torch.bfloat16 and out.shape == (m, b, n)
    _close(out, _mx_golden(x1, x2, bits1, bits2, x2_nk))


def _hif8_codes(*shape):
    """Random hifloat8 codes of finite values with magnitude at most 8 (chosen by en_dtypes'
    decoding, so NaN 0x80 and the infinities never appear)."""
    every = np.arange(256, dtype=np.uint8)
    values = every.view(en_dtypes.hifloat8).astype(np.float64)
    pool = torch.from_numpy(every[np.isfinite(values) & (np.abs(values) <= 8)])
    return pool[torch.randint(0, len(pool), shape)]


def _hif8_values(codes: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(codes.numpy().view(en_dtypes.hifloat8).astype(np.float64))


@pytest.mark.parametrize("with_x1_scale", [True, False])
def test_t_c_hifloat8(with_x1_scale):
    m, b, k, n = 4, 2, 16, 6
    x1, x2 = _hif8_codes(m, b, k), _hif8_codes(b, k, n)
    s1 = torch.rand(1) if with_x1_scale else None
    s2 = torch.rand(n)
    out = npu_anywhere.npu_transpose_quant_batchmatmul(
        x1, x2, torch.float16, x1_scale=s1, x2_scale=s2, x1_dtype=290, x2_dtype=290)
    golden = torch.einsum("mbk,bkn->mbn", _hif8_values(x1), _hif8_values(x2)) * s2.double()
    if with_x1_scale:
        golden = golden * s1.double()
    assert golden.abs().max() > 1
    _close(out, golden)


def _kc(**kw):
    m, b, k, n = kw.pop("shape", (2, 2, 512, 128))
    args = (_f8(m, b, k, dtype=kw.pop("fp8", E4M3)), _f8(b, k, n), kw.pop("dtype", 5))
    kwargs = {"x1_scale": torch.rand(m), "x2_scale": torch.rand(n)}
    kwargs.update(kw)
    return args, kwargs


def _mx(**kw):
    m, b, k, n = 2, 2, 64, 4
    kwargs = {"x1_scale": _e8m0(m, b, k // 64, 2)[0], "x2_scale": _e8m0(b, k // 64, n, 2)[0],
              "group_sizes": [0, 0, 32]}
    kwargs.update(kw)
    return (_f8(m, b, k), _f8(b, k, n), 15), kwargs


BAD = [
    ("hifloat8_output", _kc(dtype=290), NotImplementedError, "expected dtype torch.float16 or"),
    ("float32_output", _kc(dtype=6), ValueError, "expected dtype torch.float16 or torch.bfloat16"),
    ("perm_x1", _kc(perm_x1=[0, 1, 2]), ValueError, "expected perm_x1 [1, 0, 2]"),
    ("perm_x2", _kc(perm_x2=[1, 0, 2]), ValueError, "expected perm_x2 [0, 1, 2] or [0, 2, 1]"),
    ("perm_y", _kc(perm_y=[0, 1, 2]), ValueError, "expected perm_y [1, 0, 2]"),
    ("split_factor", _kc(batch_split_factor=2), ValueError, "expected batch_split_factor 1"),
    ("bias", _kc(bias=torch.rand(128)), ValueError, "expected bias None"),
    ("int8_input", ((torch.zeros(2, 2, 512, dtype=torch.int8), _f8(2, 512, 128), 5),
                    {"x2_scale": torch.rand(128)}), TypeError, "expected x1 float8_e4m3fn,"),
    ("format_mismatch", ((_f8(2, 2, 512), _f8(2, 512, 128, dtype=E5M2), 5),
                         {"x1_scale": torch.rand(2), "x2_scale": torch.rand(128)}), TypeError,
     "expected x2 the format of x1 (float8_e4m3fn)"),
    ("x1_dtype", _kc(x1_dtype=290), ValueError, "expected x1_dtype None or the format of x1"),
    ("int64_scale", _kc(x2_scale=torch.zeros(128, dtype=torch.int64)), NotImplementedError,
     "expected x2_scale float32 or float8_e8m0fnu"),
    ("no_x2_scale", _kc(x2_scale=None), ValueError, "expected x2_scale a tensor"),
    ("kc_x1_scale_size", _kc(x1_scale=torch.rand(3)), ValueError,
     "expected x1_scale a 1-D tensor of size m (2) in K-C quantization"),
    ("kc_k", _kc(shape=(2, 2, 256, 128)), ValueError, "expected x1 a k dim of 512 in K-C"),
    ("kc_n", _kc(shape=(2, 2, 512, 64)), ValueError, "expected x2 an n dim of 128 in K-C"),
    ("kc_group_sizes", _kc(group_sizes=[0, 0, 32]), ValueError, "expected group_sizes None"),
    ("k_mismatch", ((_f8(2, 2, 512), _f8(2, 256, 128), 5),
                    {"x1_scale": torch.rand(2), "x2_scale": torch.rand(128)}), RuntimeError,
     "expected x2 a k dim equal to x1's (512)"),
    ("mx_group_sizes", _mx(group_sizes=None), ValueError, "expected group_sizes one of"),
    ("mx_x1_scale_shape", _mx(x1_scale=_e8m0(2, 2, 2)[0]), ValueError,
     "expected x1_scale shape (2, 2, 1, 2)"),
    ("mx_x2_scale_dtype", _mx(x2_scale=torch.rand(4)), TypeError,
     "expected x2_scale a float8_e8m0fnu tensor in mx"),
]


@pytest.mark.parametrize("made,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs(made, error, match):
    args, kwargs = made
    for fn in (npu_anywhere.npu_transpose_quant_batchmatmul,
               torch.ops.npu.npu_transpose_quant_batchmatmul):
        with pytest.raises(error, match=re.escape(f"{OP}: {match}")):
            fn(*args, **kwargs)


def test_mx_rejects_e5m2():
    m, b, k, n = 2, 2, 64, 4
    with pytest.raises(TypeError, match=re.escape(f"{OP}: expected x1 float8_e4m3fn in mx")):
        npu_anywhere.npu_transpose_quant_batchmatmul(
            _f8(m, b, k, dtype=E5M2), _f8(b, k, n, dtype=E5M2), 15,
            x1_scale=_e8m0(m, b, 1, 2)[0], x2_scale=_e8m0(b, 1, n, 2)[0],
            group_sizes=[0, 0, 32])


def test_strict_mode_products():
    args, kwargs = _kc()
    with targets.strict("950"):
        npu_anywhere.npu_transpose_quant_batchmatmul(*args, **kwargs)
    with targets.strict("A2"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            npu_anywhere.npu_transpose_quant_batchmatmul(*args, **kwargs)


def test_no_autograd():
    args, kwargs = _kc()
    kwargs["x2_scale"] = kwargs["x2_scale"].requires_grad_()
    with pytest.raises(RuntimeError, match="no backward"):
        torch.ops.npu.npu_transpose_quant_batchmatmul(*args, **kwargs).float().sum().backward()


def _fp8_mode_calls():
    kc = _kc(shape=(3, 2, 512, 128))
    mx = _mx(x2_scale=None)
    mx[1]["x2_scale"] = _e8m0(2, 1, 4, 2)[0]
    return {"k_c": kc, "mx": mx}


@pytest.mark.parametrize("mode", ["k_c", "mx"])
def test_float8_modes_under_fake_tensor_and_compile(mode):
    # The op database cannot hold float8 samples (opcheck multiplies its inputs), so the fake
    # kernel and fullgraph compile of these modes are checked here.
    from torch._subclasses.fake_tensor import FakeTensorMode
    args, kwargs = _fp8_mode_calls()[mode]
    op = torch.ops.npu.npu_transpose_quant_batchmatmul
    eager = op(*args, **kwargs)
    fake_mode = FakeTensorMode()
    conv = lambda v: fake_mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
    with fake_mode:
        fake = op(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
    assert fake.shape == eager.shape and fake.dtype == eager.dtype
    assert fake.stride() == eager.stride()
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a, **k: op(*a, **k), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(*args, **kwargs), eager)


def test_float8_error_identical_under_fake_tensor():
    from torch._subclasses.fake_tensor import FakeTensorMode
    args, kwargs = _mx(x1_scale=_e8m0(2, 2, 2)[0])
    op = torch.ops.npu.npu_transpose_quant_batchmatmul
    with pytest.raises(ValueError) as eager:
        op(*args, **kwargs)
    fake_mode = FakeTensorMode()
    conv = lambda v: fake_mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
    with pytest.raises(ValueError) as fake, fake_mode:
        op(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
    assert str(fake.value) == str(eager.value)
