# seed 004, npu_swiglu_quant, 调用示例: the whole example, torch_npu.testing scaffolding included
# (TestCase, run_tests, SupportedDevices), indentation restored.  The added block sits before the
# `if __name__ == "__main__":` line because run_tests() exits: it records the op's call and adds
# a test, run after the seed's (unittest orders them by name), that checks the numbers.
import os
import shutil
import unittest
import numpy as np
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase, run_tests
from torch_npu.testing.common_utils import SupportedDevices


class TestNPUSwigluQuant(TestCase):
    def test_npu_swiglu_quant(self, device="npu"):
        batch_size = 4608
        hidden_size = 2048
        x_shape = (batch_size, hidden_size)
        input_data = np.random.randn(*x_shape).astype(np.float32)
        quant_mode = 1
        group_list_type = 0
        dst_type = torch.int8
        activate_left = False
        offsets = None
        num_groups = 8
        group_sizes = batch_size // num_groups
        group_index = [(i + 1) * group_sizes for i in range(num_groups)]
        smooth_scales = np.random.randn(num_groups, hidden_size // 2).astype(np.float32)
        device = "npu"
        npu_x = torch.from_numpy(input_data).to(device)
        npu_group_index = torch.from_numpy(np.array(group_index)).to(device)
        npu_smooth_scales = torch.from_numpy(smooth_scales).to(device)
        result = torch_npu.npu_swiglu_quant(
            npu_x,
            smooth_scales=npu_smooth_scales,
            offsets=offsets,
            group_index=npu_group_index,
            activate_left=False,
            quant_mode=quant_mode,
            group_list_type=group_list_type,
            dst_type=dst_type
        )


# --- added by npu_anywhere tests: check the numbers ---
# act = A * swish(B) (activate_left=False);  t = act * smooth_scales[g]  (cumsum groups)
# scale = 127 / max|t| per row;  y = rint(t * scale), saturated to int8
_calls = []
_op = torch_npu.npu_swiglu_quant


def _recording_op(*args, **kwargs):
    out = _op(*args, **kwargs)
    _calls.append((args, kwargs, out))
    return out


torch_npu.npu_swiglu_quant = _recording_op


def _check_numbers(self):
    torch_npu.npu_swiglu_quant = _op
    self.assertEqual(len(_calls), 1)
    (x,), kwargs, (y, scale) = _calls[0]
    xd = x.cpu().double()
    n = xd.shape[-1] // 2
    a, b = xd[:, :n], xd[:, n:]
    act = a * (b / (1 + torch.exp(-b)))
    ends = kwargs["group_index"].cpu().tolist()
    sizes = torch.tensor([end - start for start, end in zip([0] + ends[:-1], ends)])
    t = act * kwargs["smooth_scales"].cpu().double().repeat_interleave(sizes, dim=0)
    want_scale = 127.0 / t.abs().amax(-1)
    want = torch.round(t * want_scale[:, None]).clamp(-128, 127)
    assert y.dtype == torch.int8 and y.shape == (xd.shape[0], n)
    assert scale.dtype == torch.float32 and scale.shape == (xd.shape[0],)
    diff = (y.cpu().double() - want).abs()
    assert diff.max().item() <= 1 and (diff > 0).double().mean().item() < 1e-3
    assert torch.allclose(scale.cpu().double(), want_scale, rtol=1e-5, atol=0)
    print("EXAMPLE OK")


TestNPUSwigluQuant.test_zz_check_numbers = _check_numbers
# --- end of the added block ---

if __name__ == "__main__":
    run_tests()
