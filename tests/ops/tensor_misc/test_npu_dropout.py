"""_npu_dropout / npu_dropout_backward: mask layout, scaling, distribution, autograd."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def _unpack(mask, numel):
    """Bit e % 8 (least significant first) of byte e // 8, as plain Python ints."""
    return [(int(mask[e // 8]) >> (e % 8)) & 1 for e in range(numel)]


def _golden(x, keep_bits, p):
    """x * keep / (1 - p) in float64, with 1 - p rounded to x's dtype as the NPU passes it."""
    keep_prob = float(torch.tensor(1.0 - p, dtype=x.dtype))
    flat = x.reshape(-1).double()
    out = torch.tensor([float(v) / keep_prob if k else 0.0 for v, k in zip(flat, keep_bits)],
                       dtype=torch.float64)
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_output_is_input_scaled_where_the_mask_keeps(dtype):
    torch.manual_seed(0)
    x = (torch.rand(3, 67) + 0.5).to(dtype)         # no zeros: a kept element is non-zero
    out, mask = na._npu_dropout(x, 0.3)
    n = x.numel()
    assert mask.dtype == torch.uint8 and mask.shape == ((n + 127) // 128 * 16,)
    bits = _unpack(mask, mask.numel() * 8)
    assert not any(bits[n:])                        # pad bits are 0
    assert [int(v != 0) for v in out.reshape(-1)] == bits[:n]
    torch.testing.assert_close(out.double(), _golden(x, bits[:n], 0.3),
                               rtol={torch.float32: 1e-7}.get(dtype, 4e-3), atol=0)
    assert out.dtype == dtype and out.shape == x.shape


def test_doc_example_shapes_and_values():
    x = torch.tensor([1., 2., 3., 4.])
    out, mask = na._npu_dropout(x, 0.3)
    assert mask.shape == (16,)
    for v, k, i in zip(out.tolist(), _unpack(mask, 4), range(4)):
        assert v == (pytest.approx((i + 1) / 0.7) if k else 0.0)


def test_distribution_seed_and_extremes():
    x = torch.ones(64, 64)
    torch.manual_seed(5)
    out1, mask1 = na._npu_dropout(x, 0.25)
    torch.manual_seed(5)
    out2, mask2 = na._npu_dropout(x, 0.25)
    assert torch.equal(mask1, mask2) and torch.equal(out1, out2)
    dropped = float((out1 == 0).double().mean())
    assert abs(dropped - 0.25) < 0.03               # 4096 draws: ~4.9 standard deviations
    out, mask = na._npu_dropout(x[:, :5], 0.0)
    assert torch.equal(out, x[:, :5]) and _unpack(mask, 320) == [1] * 320
    out, mask = na._npu_dropout(x[:3], 1.0)
    assert torch.equal(out, torch.zeros(3, 64)) and not mask.any()
    out, mask = na._npu_dropout(torch.zeros(0, 4), 0.5)
    assert out.shape == (0, 4) and mask.shape == (0,)


def test_backward_golden_gradcheck_and_gen_mask_compatibility():
    g = torch.randn(5, 7, dtype=torch.float16)
    mask = torch.randint(0, 256, (16,), dtype=torch.uint8)
    got = na.npu_dropout_backward(g, mask, 0.4)
    torch.testing.assert_close(got.double(), _golden(g, _unpack(mask, 35), 0.4), rtol=4e-3,
                               atol=0)
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)

    def seeded(t):
        torch.manual_seed(3)
        return na._npu_dropout(t, 0.5)[0]
    torch.autograd.gradcheck(seeded, (x,))
    out = seeded(x)
    assert out.grad_fn is not None
    (dx,) = torch.autograd.grad(out.sum(), x)
    torch.manual_seed(3)                            # the same draw: the forward's mask
    _, mask = na._npu_dropout(x.detach(), 0.5)
    assert torch.equal(dx, _golden(torch.ones(4, 9, dtype=torch.float64), _unpack(mask, 36), 0.5))
    gen = na._npu_dropout_gen_mask(x, [4, 9], 0.5, 7, 0)
    assert torch.equal(na.npu_dropout_backward(torch.ones(4, 9), gen, 0.5),
                       _golden(torch.ones(4, 9), _unpack(gen, 36), 0.5).float())


def test_errors_everywhere():
    op = getattr(torch.ops, na.library.TORCH_NPU_NS)._npu_dropout
    x = torch.randn(5)
    match = r"_npu_dropout: expected p in \[0, 1\]"
    for call in (lambda: na._npu_dropout(x, -0.1), lambda: op(x, 1.5)):
        with pytest.raises(ValueError, match=match):
            call()
    with FakeTensorMode() as mode:
        with pytest.raises(ValueError, match=match):
            op(mode.from_tensor(x), 2.0)
    with pytest.raises(RuntimeError, match="npu_dropout_backward: expected mask at least 2 bytes"):
        na.npu_dropout_backward(torch.randn(9), torch.zeros(1, dtype=torch.uint8), 0.5)
