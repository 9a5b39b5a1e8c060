"""kernels.cpu_memory: huge-page CPU outputs change page sizes, never values or metadata."""

from __future__ import annotations

import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npu_anywhere.kernels import cpu_memory


def _huge_kib(t: torch.Tensor) -> int:
    """AnonHugePages (KiB) of the mappings over ``t``'s bytes (the advice splits the mapping:
    only its 2 MiB-aligned middle is advised)."""
    lo_t = t.data_ptr()
    hi_t = lo_t + t.numel() * t.element_size()
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo < hi_t and lo_t < hi
            elif inside and line.startswith("AnonHugePages:"):
                total += int(line.split()[1])
    return total


@pytest.mark.parametrize("rows", [3, 2100])            # 24 KiB and 8.2 MiB of float32 rows
def test_gather_rows_is_index_select(rows):
    x = torch.randn(64, 1024)
    idx = torch.randint(0, 64, (rows,))
    got = cpu_memory.gather_rows(x, idx)
    want = x.index_select(0, idx)
    assert torch.equal(got, want) and got.stride() == want.stride() and got.dtype == want.dtype


@pytest.mark.skipif(not sys.platform.startswith("linux") or cpu_memory._madvise() is None,
                    reason="transparent huge pages are off or not Linux")
def test_a_large_output_is_backed_by_huge_pages():
    x = torch.randn(8, 4096)
    out = cpu_memory.gather_rows(x, torch.zeros(4096, dtype=torch.int64))   # 64 MiB
    if _huge_kib(out) == 0:
        pytest.skip("the kernel gave no huge page (fragmented memory); the advice is only advice")
    assert _huge_kib(out) >= 2048


def test_fake_and_small_calls_are_plain_allocations():
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(4096, 1024))
        out = cpu_memory.gather_rows(x, torch.zeros(4096, dtype=torch.int64))
        assert out.shape == (4096, 1024)
    small = cpu_memory.empty_huge((4, 4), dtype=torch.float16, like=torch.empty(1))
    assert small.shape == (4, 4) and small.dtype == torch.float16


def test_the_environment_switch_turns_it_off(monkeypatch):
    cpu_memory._madvise.cache_clear()
    monkeypatch.setenv("NPU_ANYWHERE_HUGE_PAGES", "0")
    try:
        assert cpu_memory._madvise() is None
    finally:
        cpu_memory._madvise.cache_clear()
