"""One bad call, raised the same through every entry point: ``npu_anywhere.<op>``,
``torch.ops.<ns>.<op>`` and the fake kernel under FakeTensorMode."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def assert_raises_everywhere(op: str, error, match: str, *args, **kwargs) -> None:
    with pytest.raises(error, match=match):
        getattr(na, op)(*args, **kwargs)
    ns_op = getattr(getattr(torch.ops, na.library.TORCH_NPU_NS), op)
    with pytest.raises(error, match=match):
        ns_op(*args, **kwargs)
    with FakeTensorMode() as mode:
        def fake(value):
            return mode.from_tensor(value) if isinstance(value, torch.Tensor) else value
        fake_args = [fake(a) for a in args]
        fake_kwargs = {name: fake(value) for name, value in kwargs.items()}
        with pytest.raises(error, match=match):
            ns_op(*fake_args, **fake_kwargs)
