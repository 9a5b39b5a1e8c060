"""The bookkeeping behind copying transfers (npu_anywhere.compat.placement), in process: which
CPU storages stand for NPU memory, and when a transfer copies."""

from __future__ import annotations

import torch

from npu_anywhere.compat import placement


def test_transfer_to_npu_copies_host_memory_once():
    host = torch.arange(6.0).reshape(2, 3)
    moved = placement.finish_to_npu(host, host)  # torch's .to(cpu) returned the tensor itself
    assert moved is not host and torch.equal(moved, host)
    moved.add_(1)
    assert torch.equal(host, torch.arange(6.0).reshape(2, 3))
    assert placement.on_npu_memory(moved) and not placement.on_npu_memory(host)
    # Already on the npu: the tensor itself; views and .data share its memory.
    assert placement.finish_to_npu(moved, moved) is moved
    view = moved.t()
    assert placement.on_npu_memory(view) and placement.finish_to_npu(view, view) is view
    assert placement.on_npu_memory(moved.data)


def test_strides_survive_the_copy():
    host = torch.arange(12.0).reshape(3, 4).t()
    moved = placement.finish_to_npu(host, host)
    assert moved.stride() == host.stride() and torch.equal(moved, host)


def test_transfer_to_host_copies_npu_memory_only():
    npu = placement.mark_npu_memory(torch.ones(3))
    back = placement.finish_to_cpu(npu, npu)
    assert back is not npu and not placement.on_npu_memory(back)
    back.zero_()
    assert npu.sum() == 3
    plain = torch.ones(3)
    assert placement.finish_to_cpu(plain, plain) is plain


def test_a_fresh_result_is_already_a_copy():
    host = torch.ones(2)
    converted = host.half()  # what .to("npu", torch.float16) gets back from torch
    assert placement.finish_to_npu(host, converted) is converted
    assert placement.on_npu_memory(converted)


def test_marks_die_with_their_storage():
    import gc

    before = len(placement._npu_storages)
    placement.mark_npu_memory(torch.ones(4))
    gc.collect()
    assert len(placement._npu_storages) == before


def test_copies_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(placement, "COPY", False)
    host = torch.ones(2)
    moved = placement.finish_to_npu(host, host)
    assert moved is host and placement.on_npu_memory(host)
    assert placement.finish_to_cpu(host, host) is host


def test_non_tensors_and_sparse_tensors_pass_through():
    assert placement.finish_to_npu(torch.ones(1), "x") == "x"
    sparse = torch.eye(2).to_sparse()
    assert not placement.on_npu_memory(sparse)
    assert placement.mark_npu_memory(sparse) is sparse
