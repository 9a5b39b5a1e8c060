"""npu_nsa_compress / npu_nsa_compress_grad against float64 goldens written from the doc formula
(window by window, as op-plugin's test_npu_nsa_compress*.py goldens do)."""

import pytest
import torch

import npu_anywhere as na


def _golden(x, w, block, stride, cum):
    x, w = x.double(), w.double()
    rows, start = [], 0
    for end in cum:
        length = end - start
        j = 0
        while length >= block and j * stride + block <= length:
            first = start + j * stride
            rows.append(sum(x[first + i] * w[i].unsqueeze(-1) for i in range(block)))
            j += 1
        start = end
    return torch.stack(rows) if rows else x.new_zeros(0, *x.shape[1:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block,stride,cum", [(32, 16, [0, 5, 49]), (16, 16, [20, 20, 71]),
                                              (48, 16, [47, 100])])
def test_forward_matches_golden(dtype, block, stride, cum):
    g = torch.Generator().manual_seed(block + cum[-1])
    x = torch.randn(cum[-1], 3, 16, generator=g).to(dtype)
    w = torch.randn(block, 3, generator=g).to(dtype)
    before = x.clone()
    out = na.npu_nsa_compress(x, w, block, stride, actual_seq_len=cum)
    want = _golden(x, w, block, stride, cum)
    assert out.dtype == dtype and out.shape == want.shape
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.double(), want.to(dtype).double(), rtol=tol, atol=tol * 4)
    assert torch.equal(x, before)


def test_non_contiguous_input_and_torch_ops_path():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 40, 32, generator=g, dtype=torch.float64).transpose(0, 1)[..., ::2]
    w = torch.randn(3, 16, generator=g, dtype=torch.float64).t()
    assert not x.is_contiguous() and not w.is_contiguous()
    out = torch.ops.npu.npu_nsa_compress(x, w, 16, 16, actual_seq_len=[40])
    torch.testing.assert_close(out, _golden(x, w, 16, 16, [40]))


def test_grad_op_and_autograd_match_golden_gradients():
    g = torch.Generator().manual_seed(4)
    cum, block, stride = [0, 5, 49], 32, 16
    x = torch.randn(49, 2, 16, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(block, 2, generator=g, dtype=torch.float64, requires_grad=True)
    want = _golden(x, w, block, stride, cum)
    dy = torch.randn(want.shape, generator=g, dtype=torch.float64)
    gx, gw = torch.autograd.grad(want, (x, w), dy)
    dx, dw = na.npu_nsa_compress_grad(dy, x.detach(), w.detach(), block, stride,
                                      actual_seq_len=cum)
    torch.testing.assert_close(dx, gx)
    torch.testing.assert_close(dw, gw)
    out = na.npu_nsa_compress(x, w, block, stride, actual_seq_len=cum)
    ax, aw = torch.autograd.grad(out, (x, w), dy)
    torch.testing.assert_close(ax, gx)
    torch.testing.assert_close(aw, gw)
    # half-precision grads: float32 math rounded once
    hx, hw = na.npu_nsa_compress_grad(dy.half(), x.detach().half(), w.detach().half(), block,
                                      stride, actual_seq_len=cum)
    assert hx.dtype == hw.dtype == torch.float16
    torch.testing.assert_close(hx.double(), gx, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(actual_seq_len=None), ValueError, "expected actual_seq_len a list"),
    (dict(actual_seq_len=[30, 20, 40]), ValueError, "non-decreasing"),
    (dict(actual_seq_len=[39]), ValueError, "a last value equal to the token count T = 40"),
])
def test_bad_lengths(kwargs, error, match):
    x = torch.randn(40, 2, 16, dtype=torch.float16)
    with pytest.raises(error, match=match):
        na.npu_nsa_compress(x, torch.randn(16, 2, dtype=torch.float16), 16, 16, **kwargs)


def test_bad_dtypes_and_strict_rules():
    x = torch.randn(40, 2, 16, dtype=torch.float16)
    with pytest.raises(TypeError, match="npu_nsa_compress: expected"):
        na.npu_nsa_compress(x, torch.randn(16, 2), 16, 16, actual_seq_len=[40])
    x8 = torch.randn(40, 2, 8, dtype=torch.float16)
    w = torch.randn(16, 2, dtype=torch.float16)
    assert na.npu_nsa_compress(x8, w, 16, 16, actual_seq_len=[40]).shape == (2, 2, 8)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected head_dim a positive multiple of 16"):
            na.npu_nsa_compress(x8, w, 16, 16, actual_seq_len=[40])
        with pytest.raises(TypeError):
            na.npu_nsa_compress(x.float(), w.float(), 16, 16, actual_seq_len=[40])
    with na.strict("A3"):
        with pytest.raises(Exception, match="npu_nsa_compress"):
            na.npu_nsa_compress(x, w, 16, 16, actual_seq_len=[40])
