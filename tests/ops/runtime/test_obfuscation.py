"""PMCC obfuscation calls: argument checks first, then the documented no-engine error 507018."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na

FD = torch.tensor([7], dtype=torch.int32)


def test_valid_calls_raise_the_documented_no_engine_error():
    for call in (lambda: na.obfuscation_initialize(3584, 0, 1, data_type=torch.bfloat16,
                                                   thread_num=4, obf_coefficient=1.0),
                 lambda: na.obfuscation_initialize(0, 0, 3, data_type=torch.float16),
                 lambda: na.obfuscation_finalize(FD),
                 lambda: na.obfuscation_calculate(FD, torch.randn(4, 16, dtype=torch.bfloat16),
                                                  torch.tensor([16], dtype=torch.int32))):
        with pytest.raises(RuntimeError, match="error code 507018"):
            call()


def test_bad_arguments_are_refused_before_the_engine_is_asked():
    f = na.obfuscation_initialize
    with pytest.raises(ValueError, match="expected tp_rank in \\[0, 1024\\], but got 2000"):
        f(3584, 2000, 1, data_type=torch.float16)
    with pytest.raises(ValueError, match="expected thread_num one of"):
        f(3584, 0, 2, data_type=torch.int8, thread_num=7)
    with pytest.raises(TypeError, match="expected data_type float16, float32, bfloat16 or int8"):
        f(3584, 0, 1, data_type=torch.float64)
    with pytest.raises(RuntimeError, match="expected fd the \\(1,\\) socket tensor"):
        na.obfuscation_calculate(torch.zeros(2, dtype=torch.int32), torch.randn(2, 4),
                                 torch.tensor([4]))


def test_shapes_are_known_to_fake_tensors_and_the_npu_module_has_them():
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(3, 8, dtype=torch.float16))
        out = torch.ops.npu.obfuscation_calculate(mode.from_tensor(FD), x,
                                                  mode.from_tensor(torch.tensor([8])))
        fd = torch.ops.npu.obfuscation_initialize(8, 0, 1, data_type=torch.float16)
    assert out.shape == (3, 8) and out.dtype == torch.float16
    assert fd.shape == (1,) and fd.dtype == torch.int32
    from npu_anywhere.compat import npu_module
    module = npu_module.make_module("probe")
    assert module.obfuscation_calculate is na.obfuscation_calculate
