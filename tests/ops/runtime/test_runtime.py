"""The runtime helpers: copy_memory_ (raw memory copy), empty_with_format /
empty_with_swapped_memory (allocation with a recorded format), npu_prefetch (checks only) and
the float-status ops (always "no overflow")."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def test_copy_memory_matches_the_seed_example():
    a = torch.IntTensor([0, 0, -1])
    b = torch.IntTensor([1, 1, 1])
    out = na.copy_memory_(a, b)
    assert out is a and a.tolist() == [1, 1, 1] and b.tolist() == [1, 1, 1]


def test_copy_memory_copies_raw_memory_ignoring_strides():
    # dst: a transposed 2 x 3 view (6 elements of memory); src: a 2-D view whose memory from
    # its offset is read in order, whatever its strides say.
    dst_base = torch.zeros(3, 2)
    dst = dst_base.t()
    src_base = torch.arange(20.0)
    src = src_base[4:].view(4, 4)[:, ::2]
    na.copy_memory_(dst, src)
    assert dst_base.reshape(-1).tolist() == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    # dst's numel bounds the copy even when its storage is longer
    long_dst = torch.zeros(10)
    na.copy_memory_(long_dst[2:5], torch.tensor([7.0, 8.0, 9.0, 10.0]))
    assert long_dst.tolist() == [0, 0, 7, 8, 9, 0, 0, 0, 0, 0]


def test_copy_memory_checks_before_writing():
    dst = torch.zeros(4)
    with pytest.raises(TypeError, match="copy_memory_: expected src dtype torch.float32"):
        na.copy_memory_(dst, torch.ones(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="copy_memory_: expected src memory of at least 4"):
        na.copy_memory_(dst, torch.ones(3))
    assert dst.tolist() == [0, 0, 0, 0]


def test_empty_with_format_records_the_format():
    t = na.empty_with_format((2, 3), dtype=torch.float16, device="npu", acl_format=29)
    assert t.shape == (2, 3) and t.dtype == torch.float16 and na.get_npu_format(t) == 29
    plain = na.empty_with_format([4], device="npu:0")
    assert plain.dtype == torch.get_default_dtype() and na.get_npu_format(plain) == 2
    assert na.empty_with_format((2,), device="cpu").device.type == "cpu"
    with pytest.raises(ValueError, match="empty_with_format: expected layout torch.strided"):
        na.empty_with_format((2,), layout=torch.sparse_coo)
    with pytest.raises(TypeError, match="empty_with_format: expected size a sequence"):
        na.empty_with_format((2, -1))


def test_empty_with_swapped_memory_supports_the_documented_ops():
    t = na.empty_with_swapped_memory([5], dtype=torch.float32, device="npu")
    t.fill_(2.0)
    assert t.tolist() == [2.0] * 5
    t.zero_()
    assert t.abs().sum() == 0


def test_prefetch_does_nothing_after_its_checks():
    w = torch.randn(4, 4)
    before = w.clone()
    assert na.npu_prefetch(w, None, 1 << 30, 0) is None          # larger than the weight
    assert torch.ops.npu.npu_prefetch(w, torch.ones(1), 16, 60) is None   # schema: -> ()
    assert torch.equal(w, before)
    with pytest.raises(ValueError, match="npu_prefetch: expected offset inside"):
        na.npu_prefetch(w, None, 16, 64)


def test_float_status_reads_no_overflow():
    x = torch.randn(1, 2, 3)
    status = na.npu_alloc_float_status(x)
    assert status.dtype == torch.float32 and status.tolist() == [0.0] * 8
    overflowed = torch.tensor([float("inf")]) * 2      # overflow stays in the values here
    assert torch.isinf(overflowed).all()
    assert na.npu_get_float_status(status).tolist() == [0.0] * 8
    assert na.npu_clear_float_status(status, 1).tolist() == [0.0] * 8
    with pytest.raises(TypeError, match="npu_get_float_status: expected self dtype in"):
        na.npu_get_float_status(status.half())
