"""npu_batch_gather_matmul(_) against the aclnnAddLora formula, token by token in float64."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

F16, F64, I32 = torch.float16, torch.float64, torch.int32


def _golden(y, x, wb, indices, wa, layer_idx, scale, y_offset, *, kernel_rounding):
    """y[i, off:off + H2] += (x[i] @ wa[w, l]^T) @ wb[w, l]^T * scale, one token at a time.

    ``kernel_rounding``: round to float16 where the A2 kernel does (after each matmul, the
    scale itself, the scaled product and the sum); otherwise the exact float64 formula.
    """
    def r(v):
        return v.half().double() if kernel_rounding else v

    out = y.double().clone()
    h2 = wb.shape[2]
    s = r(torch.tensor(scale, dtype=F64))
    for i, w in enumerate(indices.tolist()):
        if w < 0 or w == wb.shape[0]:
            continue
        z = x[i].double()
        if wa is not None:
            z = r(wa[w, layer_idx].double() @ z)
        z2 = r(wb[w, layer_idx].double() @ z)
        cols = slice(y_offset, y_offset + h2)
        out[i, cols] = r(out[i, cols] + r(z2 * s))
    return out


def _ints(*shape, lo=-3, hi=4, dtype=F16):
    return torch.randint(lo, hi, shape).to(dtype)


@pytest.mark.parametrize("with_a", [True, False])
def test_integer_inputs_match_the_kernel_rounding_exactly(with_a):
    # Integer data: every float32 sum is exact, so only the float16 rounding steps remain
    # (Z1 beyond 2048 rounds to even, scale 1e-3 is float16(1e-3), y + delta rounds).
    torch.manual_seed(0)
    b, h1, h2, r, w, layers = 9, 64, 32, 16, 3, 2
    y = _ints(b, 48, lo=-900, hi=900)
    x = _ints(b, h1, lo=-40, hi=41)
    wa = _ints(w, layers, r, h1, lo=-7, hi=8) if with_a else None
    wb = _ints(w, layers, h2, r if with_a else h1, lo=-9, hi=10)
    idx = torch.tensor([0, 2, -1, 1, 2, 3, 0, -5, 1], dtype=I32)
    out = npu_anywhere.npu_batch_gather_matmul(y.clone(), x, wb, idx, wa, layer_idx=1,
                                               scale=1e-3, y_offset=16, y_slice_size=h2)
    golden = _golden(y, x, wb, idx, wa, 1, 1e-3, 16, kernel_rounding=True)
    assert out.dtype == F16 and out.shape == y.shape
    assert torch.equal(out.double(), golden)
    # The rounding steps matter here: the exact formula differs.
    exact = _golden(y, x, wb, idx, wa, 1, 1e-3, 16, kernel_rounding=False)
    assert not torch.equal(out.double(), exact)


@pytest.mark.parametrize("b,h1,h2,r,w,off", [(1, 16, 16, 16, 1, 0), (13, 48, 32, 32, 4, 16),
                                            (6, 32, 64, 128, 2, 0)])
def test_random_inputs_close_to_float64_formula(b, h1, h2, r, w, off):
    torch.manual_seed(b)
    y = torch.randn(b, off + h2 + 16).half()
    x = torch.randn(b, h1).half()
    wa = (torch.randn(w, 2, r, h1) / h1 ** 0.5).half()
    wb = (torch.randn(w, 2, h2, r) / r ** 0.5).half()
    idx = torch.randint(-1, w, (b,), dtype=I32)
    out = npu_anywhere.npu_batch_gather_matmul(y.clone(), x, wb, idx, wa, layer_idx=1,
                                               scale=0.5, y_offset=off)
    golden = _golden(y, x, wb, idx, wa, 1, 0.5, off, kernel_rounding=False)
    torch.testing.assert_close(out.double(), golden, rtol=4e-3, atol=4e-3)


def test_float64_has_no_intermediate_rounding():
    torch.manual_seed(1)
    y, x = torch.randn(5, 32, dtype=F64), torch.randn(5, 16, dtype=F64)
    wa, wb = torch.randn(2, 1, 16, 16, dtype=F64), torch.randn(2, 1, 16, 16, dtype=F64)
    idx = torch.tensor([1, 0, -1, 1, 2], dtype=I32)
    out = npu_anywhere.npu_batch_gather_matmul(y.clone(), x, wb, idx, wa, scale=0.3,
                                               y_offset=8)
    golden = _golden(y, x, wb, idx, wa, 0, 0.3, 8, kernel_rounding=False)
    torch.testing.assert_close(out, golden, rtol=1e-12, atol=1e-12)


def test_op_plugin_golden_case():
    # op-plugin test_npu_batch_gather_matmul.py: weights padded with a zero adapter, scale 2.
    torch.manual_seed(12)
    y = torch.randn(10, 128).half()
    x = torch.randn(10, 128).half()
    wa = torch.randn(2, 1, 16, 128).half()
    wb = torch.randn(2, 1, 128, 16).half()
    idx = torch.randint(0, 2, (10,)).to(I32)
    out = npu_anywhere.npu_batch_gather_matmul_(y.clone(), x, wb, idx, wa, y_offset=0,
                                                y_slice_size=128, layer_idx=0, scale=2)
    pad_a = torch.cat((wa, torch.zeros(1, 1, 16, 128).half()))[idx.long(), 0].double()
    pad_b = torch.cat((wb, torch.zeros(1, 1, 128, 16).half()))[idx.long(), 0].double()
    z1 = torch.bmm(x.double().unsqueeze(1), pad_a.transpose(-1, -2))
    expected = y.double() + torch.bmm(z1, pad_b.transpose(-1, -2)).squeeze(1) * 2
    torch.testing.assert_close(out.double(), expected, rtol=1e-2, atol=0.15)


def test_public_call_adds_into_input_as_on_the_npu():
    # op-plugin test_npu_batch_gather_matmul.py calls the out-of-place form and then checks
    # y itself against the padded-adapter golden: the kernel adds into y and op-plugin
    # returns y.  torch.ops.npu's functional schema instead leaves y alone.
    torch.manual_seed(12)
    y = torch.randn(1, 128).half()
    x = torch.randn(1, 16).half()
    wa = torch.randn(2, 1, 16, 16).half()
    wb = torch.randn(2, 1, 128, 16).half()
    idx = torch.tensor([1], dtype=I32)
    z1 = x.double() @ wa[1, 0].double().T
    expected = y.double() + (z1 @ wb[1, 0].double().T) * 2
    before = y.clone()
    functional = torch.ops.npu.npu_batch_gather_matmul(y, x, wb, idx, wa, scale=2)
    assert torch.equal(y, before)
    out = npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx, wa, scale=2)
    assert out is y and torch.equal(y, functional)
    torch.testing.assert_close(y.double(), expected, rtol=1e-2, atol=0.1)
    with pytest.raises(RuntimeError, match="^npu_batch_gather_matmul: expected indices dim 0"):
        npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx.repeat(2), wa)
    assert torch.equal(y, functional)
    # the write-back traces in one graph (dynamo's eager backend: the tracing is the point)
    compiled = torch.compile(lambda t: npu_anywhere.npu_batch_gather_matmul(t, x, wb, idx, wa,
                                                                            scale=2),
                             fullgraph=True, backend="eager")
    again = before.clone()
    assert torch.equal(compiled(again), functional) and torch.equal(again, functional)


def test_noncontiguous_inputs():
    torch.manual_seed(2)
    b = 7
    y = torch.randn(64, b).half().t()                        # (7, 64), column-major
    x = torch.randn(b, 64).half()[:, ::2]                    # (7, 32), strided
    wa = torch.randn(3, 2, 32, 16).half().transpose(2, 3)    # (3, 2, 16, 32)
    wb = torch.randn(3, 2, 16, 32).half().transpose(2, 3)    # (3, 2, 32, 16)
    idx = torch.tensor([2, 9, 0, 9, 1, 9, -1, 9, 2, 9, 0, 9, 1], dtype=I32)[::2]
    assert not any(t.is_contiguous() for t in (y, x, wa, wb, idx))
    contiguous = npu_anywhere.npu_batch_gather_matmul(y.contiguous(), x.contiguous(),
                                                      wb.contiguous(), idx.contiguous(),
                                                      wa.contiguous(), layer_idx=1,
                                                      y_offset=32)
    functional = torch.ops.npu.npu_batch_gather_matmul(y, x, wb, idx, wa, layer_idx=1,
                                                       y_offset=32)
    assert torch.equal(functional, contiguous)
    assert functional.stride() == y.stride()                 # the input's layout
    inplace = npu_anywhere.npu_batch_gather_matmul_(y, x, wb, idx, wa, layer_idx=1,
                                                    y_offset=32)
    assert inplace is y and torch.equal(y, contiguous)


def test_inplace_writes_only_the_documented_window():
    torch.manual_seed(3)
    y = torch.randn(6, 80).half()
    x = torch.randn(6, 16).half()
    wa, wb = torch.randn(2, 1, 16, 16).half(), torch.randn(2, 1, 32, 16).half()
    idx = torch.tensor([0, -1, 1, 2, 0, -3], dtype=I32)      # 2 == W: skipped like -1
    before = y.clone()
    out = npu_anywhere.npu_batch_gather_matmul_(y, x, wb, idx, wa, y_offset=24,
                                                y_slice_size=-1)
    assert out is y
    changed = (y != before)
    assert not changed[[1, 3, 5]].any()                       # skipped tokens
    assert not changed[:, :24].any() and not changed[:, 56:].any()
    assert changed[[0, 2, 4], 24:56].any()
    golden = _golden(before, x, wb, idx, wa, 0, 1e-3, 24, kernel_rounding=False)
    torch.testing.assert_close(y.double(), golden, rtol=4e-3, atol=4e-3)


def test_index_beyond_adapters_raises_before_writing():
    y = torch.randn(3, 16).half()
    x = torch.randn(3, 16).half()
    wb = torch.randn(2, 1, 16, 16).half()
    before = y.clone()
    idx = torch.tensor([0, 3, 1], dtype=I32)
    with pytest.raises(IndexError, match="npu_batch_gather_matmul_: expected indices values < 2"):
        npu_anywhere.npu_batch_gather_matmul_(y, x, wb, idx)
    assert torch.equal(y, before)
    with pytest.raises(RuntimeError, match="3 at position 1"):
        torch.ops.npu.npu_batch_gather_matmul(y, x, wb, idx)


def test_bad_inputs():
    y, x = torch.zeros(2, 32).half(), torch.zeros(2, 16).half()
    wb = torch.zeros(1, 1, 16, 16).half()
    idx = torch.zeros(2, dtype=I32)
    op = npu_anywhere.npu_batch_gather_matmul
    with pytest.raises(ValueError, match="expected weight_b a third dim"):
        op(y, x, torch.zeros(1, 1, 48, 16).half(), idx)
    with pytest.raises(RuntimeError, match="expected weight_b a fourth dim equal to x's"):
        op(y, x, torch.zeros(1, 1, 16, 32).half(), idx)
    with pytest.raises(ValueError, match="expected y_offset in"):
        op(y, x, wb, idx, y_offset=-1)
    with pytest.raises(ValueError, match="expected x a non-empty tensor"):
        op(y, torch.zeros(2, 0).half(), wb, idx)
    with pytest.raises(ValueError, match="expected weight_b W and L"):
        op(y, x, torch.zeros(33, 1, 16, 16).half(), idx)
    with pytest.raises(TypeError, match="expected x the same dtype as input"):
        op(y, x.double(), wb, idx)


def test_self_alias_and_strict_products():
    y, x = torch.zeros(2, 16).half(), torch.ones(2, 16).half()
    wb = torch.ones(1, 1, 16, 16).half()
    idx = torch.zeros(2, dtype=I32)
    via_alias = npu_anywhere.npu_batch_gather_matmul(self=y.clone(), x=x, weight_b=wb, indices=idx,
                                                     scale=1.0)
    assert torch.equal(via_alias, torch.full((2, 16), 16.0, dtype=F16))
    for product in ("A2", "310P"):
        with targets.strict(product):
            npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx)
    with targets.strict("A3"), pytest.raises(RuntimeError, match="expected a product"):
        npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx)
    with targets.strict("A2"), pytest.raises(TypeError, match="expected input dtype in"):
        npu_anywhere.npu_batch_gather_matmul(y.double(), x.double(), wb.double(), idx)


def test_weight_a_read_as_the_kernel_addresses_it():
    # Seed 004's example passes weight_a [2, 1, 16, 4096] with H1 = 16: the NPU reads the
    # first W*L*R*H1 elements as a packed [W, L, R, H1] array; strict mode refuses it.
    torch.manual_seed(4)
    y, x = torch.randn(4, 32).half(), torch.randn(4, 16).half()
    wb = torch.randn(2, 1, 32, 16).half()
    wa_big = torch.randn(2, 1, 16, 64).half()
    idx = torch.tensor([1, 0, 1, -1], dtype=I32)
    out = npu_anywhere.npu_batch_gather_matmul(y.clone(), x, wb, idx, wa_big, scale=0.5)
    packed = wa_big.reshape(-1)[:2 * 16 * 16].view(2, 1, 16, 16)
    golden = _golden(y, x, wb, idx, packed, 0, 0.5, 0, kernel_rounding=True)
    torch.testing.assert_close(out.double(), golden, rtol=2e-3, atol=2e-3)
    with targets.strict("A2"), pytest.raises(RuntimeError, match=r"expected weight_a shape"):
        npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx, wa_big)
    with pytest.raises(RuntimeError, match="at least W\\*L\\*R\\*H1 = 512 elements"):
        npu_anywhere.npu_batch_gather_matmul(y, x, wb, idx, torch.zeros(2, 1, 16, 8).half())
