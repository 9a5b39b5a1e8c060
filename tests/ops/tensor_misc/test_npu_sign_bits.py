"""npu_sign_bits_pack / npu_sign_bits_unpack against bit-by-bit Python goldens."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def _pack_golden(x, size):
    bits = [0 if float(v) < 0 else 1 for v in x]    # -0.0 and NaN: 1 (np.sign(x) + 1 != 0)
    bits += [0] * (-len(bits) % 8)
    packed = [sum(b << j for j, b in enumerate(bits[k:k + 8])) for k in range(0, len(bits), 8)]
    return torch.tensor(packed, dtype=torch.uint8).reshape(size, -1)


def _unpack_golden(x, size, dtype):
    values = [1.0 if (int(b) >> j) & 1 else -1.0 for b in x for j in range(8)]
    return torch.tensor(values, dtype=dtype).reshape(size, -1)


def test_doc_examples():
    a = torch.tensor([5, 4, 3, 2, 0, -1, -2, 4, 3, 2, 1, 0, -1, -2], dtype=torch.float32)
    assert na.npu_sign_bits_pack(a, 2).tolist() == [[159], [15]]
    assert na.npu_sign_bits_pack(a, 1).tolist() == [[159, 15]]
    b = torch.tensor([159, 15], dtype=torch.uint8)
    assert na.npu_sign_bits_unpack(b, 2, torch.float32).tolist() == [
        [1., 1., 1., 1., 1., -1., -1., 1.], [1., 1., 1., 1., -1., -1., -1., -1.]]
    assert na.npu_sign_bits_unpack(b, 1, 1).dtype == torch.float16   # the seed's int code


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("n,size", [(17, 1), (8, 1), (33, 5), (16, 2), (1, 1), (0, 3)])
def test_pack_golden_and_round_trip(dtype, n, size):
    gen = torch.Generator().manual_seed(n)
    x = (torch.rand(n, generator=gen) * 20 - 10).to(dtype)
    if n > 3:
        x[1], x[2], x[3] = -0.0, float("nan"), 0.0
    got = na.npu_sign_bits_pack(x, size)
    assert got.dtype == torch.uint8 and torch.equal(got, _pack_golden(x, size))
    back = na.npu_sign_bits_unpack(got.reshape(-1), 1, dtype)[0, :n]
    assert torch.equal(back, torch.where(x < 0, -1.0, 1.0).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_unpack_golden_non_contiguous(dtype):
    base = torch.randint(0, 256, (2, 6), dtype=torch.uint8)
    x = base[:, 1]                                  # stride 6
    before = base.clone()
    assert torch.equal(na.npu_sign_bits_unpack(x, 4, dtype), _unpack_golden(x, 4, dtype))
    assert torch.equal(base, before)
    y = torch.randn(20, 2)[:, 0]
    assert torch.equal(na.npu_sign_bits_pack(y, 3), _pack_golden(y, 3))


def test_errors_everywhere():
    ns = getattr(torch.ops, na.library.TORCH_NPU_NS)
    cases = [
        (na.npu_sign_bits_pack, ns.npu_sign_bits_pack, ValueError,
         r"npu_sign_bits_pack: expected size a positive divisor of the packed length "
         r"ceil\(17 / 8\) = 3", (torch.randn(17), 2)),
        (na.npu_sign_bits_pack, ns.npu_sign_bits_pack, TypeError,
         "npu_sign_bits_pack: expected self dtype in", (torch.randn(8).double(), 1)),
        (na.npu_sign_bits_unpack, ns.npu_sign_bits_unpack, ValueError,
         "npu_sign_bits_unpack: expected size a positive divisor", (
             torch.zeros(3, dtype=torch.uint8), 0, torch.float32)),
        (na.npu_sign_bits_unpack, ns.npu_sign_bits_unpack, ValueError,
         "npu_sign_bits_unpack: expected input a 1-D tensor", (
             torch.zeros(1, 3, dtype=torch.uint8), 1, torch.float32)),
    ]
    for fn, op, error, match, args in cases:
        with pytest.raises(error, match=match):
            fn(*args)
        with pytest.raises(error, match=match):
            op(*args)
        with FakeTensorMode() as mode:
            with pytest.raises(error, match=match):
                op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
