"""Fixtures shared by the MoE routing tests."""

from __future__ import annotations

import shutil

import pytest
import torch


def _have_cpp_compiler() -> bool:
    """Whether the compiler Inductor would use exists (the C++ kernels are built with it)."""
    from torch._inductor import cpp_builder
    try:
        return shutil.which(cpp_builder.get_cpp_compiler()) is not None
    except Exception:        # Inductor found no compiler at all
        return False


@pytest.fixture
def built_cpu_top_k():
    """The C++ stable top-k built (once per process; the suite otherwise never compiles).
    Skips only without a C++ compiler; with one, a failed build fails."""
    from npu_anywhere.kernels import cpu_top_k
    from npu_anywhere.kernels.compiled import compiling_after
    with compiling_after(0):
        reason = cpu_top_k.supports(torch.zeros(2, 4), 2)
        if reason is not None and "build failure" in reason and not _have_cpp_compiler():
            pytest.skip(f"no C++ toolchain: {reason}")
        assert reason is None
        yield
