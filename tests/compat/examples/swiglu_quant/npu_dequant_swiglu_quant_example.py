# seed 004, npu_dequant_swiglu_quant, 调用示例 (单算子模式调用): the whole example,
# torch_npu.testing scaffolding included (TestCase, run_tests, SupportedDevices), indentation
# restored.  The added block sits before the `if __name__ == "__main__":` line because
# run_tests() exits: it records the op's call and adds a test, run after the seed's (unittest
# orders them by name), that checks the numbers.
import os
import shutil
import unittest
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase, run_tests
from torch_npu.testing.common_utils import SupportedDevices


class TestNPUDequantSwigluQuant(TestCase):
    def test_npu_dequant_swiglu_quant(self, device="npu"):
        tokens_num = 4608
        hidden_size = 2048
        x = torch.randint(-10, 10, (tokens_num, hidden_size), dtype=torch.int32)
        weight_scale = torch.randn((1, hidden_size), dtype=torch.float32)
        activation_scale = torch.randn((tokens_num, 1), dtype=torch.float32)
        quant_scale = torch.randn((1, hidden_size // 2), dtype=torch.float32)
        group_index = torch.tensor([tokens_num], dtype=torch.int64)
        bias = None
        y, scale = torch_npu.npu_dequant_swiglu_quant(
            x.npu(),
            weight_scale=weight_scale.npu(),
            activation_scale=activation_scale.npu(),
            bias=None,
            quant_scale=quant_scale.npu(),
            quant_offset=None,
            group_index=group_index.npu(),
            activate_left=True,
            quant_mode=1,
            swiglu_mode=1,
            clamp_limit=7.0,
            glu_alpha=1.702,
            glu_bias=1.0
        )


# --- added by npu_anywhere tests: check the numbers ---
# d = x * weight_scale * activation_scale;  swiglu_mode=1: g = clamp(d[:, 0::2], max=7),
# l = clamp(d[:, 1::2], -7, 7), act = g * sigmoid(1.702 g) * (l + 1);  t = act * quant_scale;
# scale = max|t| / 127;  y = rint(t * 127 / max|t|), saturated to int8
_calls = []
_op = torch_npu.npu_dequant_swiglu_quant


def _recording_op(*args, **kwargs):
    out = _op(*args, **kwargs)
    _calls.append((args, kwargs, out))
    return out


torch_npu.npu_dequant_swiglu_quant = _recording_op


def _check_numbers(self):
    torch_npu.npu_dequant_swiglu_quant = _op
    self.assertEqual(len(_calls), 1)
    (x,), kwargs, (y, scale) = _calls[0]
    tokens_num, hidden_size = x.shape
    d = (x.cpu().double() * kwargs["weight_scale"].cpu().double()
         * kwargs["activation_scale"].cpu().double())
    g = d[:, 0::2].clamp(max=7.0)
    lin = d[:, 1::2].clamp(-7.0, 7.0)
    act = g * torch.sigmoid(1.702 * g) * (lin + 1.0)
    t = act * kwargs["quant_scale"].cpu().double()
    mx = t.abs().amax(-1)
    want = torch.round(t * (127 / mx)[:, None]).clamp(-128, 127)
    assert y.dtype == torch.int8 and y.shape == (tokens_num, hidden_size // 2)
    assert scale.dtype == torch.float32 and scale.shape == (tokens_num,)
    diff = (y.cpu().double() - want).abs()
    assert diff.max().item() <= 1 and (diff > 0).double().mean().item() < 1e-3
    assert torch.allclose(scale.cpu().double(), mx / 127, rtol=1e-5, atol=0)
    print("EXAMPLE OK")


TestNPUDequantSwigluQuant.test_zz_check_numbers = _check_numbers
# --- end of the added block ---

if __name__ == "__main__":
    run_tests()
