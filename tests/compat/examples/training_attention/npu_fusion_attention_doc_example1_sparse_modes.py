# seed 004, torch_npu.npu_fusion_attention, 调用示例 / 单算子模式调用 (indentation restored).
import math
import unittest
import numpy as np
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase, run_tests
from torch_npu.testing.common_utils import SupportedDevices
class TestNPUFlashAttention(TestCase):
    def supported_op_exec(self, query, key, value, atten_mask):
        scale = 0.08838
        qk = torch.matmul(query, key.transpose(2, 3)).mul(scale)
        qk = qk + atten_mask * (-10000.0)
        softmax_res = torch.nn.functional.softmax(qk, dim=-1)
        attention_out = torch.matmul(softmax_res, value)
        return attention_out
    def custom_op_exec(self, query, key, value, sparse_params):
        scale = 0.08838
        atten_mask = None
        if sparse_params[0] == 0:
            shape = [1, 8, 256, 256]
            atten_mask_u = np.triu(np.ones(shape), k=sparse_params[1] + 1)
            atten_mask_l = np.tril(np.ones(shape), k=-sparse_params[2] - 1)
            atten_masks = atten_mask_u + atten_mask_l
            atten_mask = torch.tensor(atten_masks).to(torch.float16).bool().npu()
        if sparse_params[0] == 2 or sparse_params[0] == 3 or sparse_params[0] == 4:
            atten_masks = torch.from_numpy(np.triu(np.ones([2048, 2048]), k=1))
            atten_mask = torch.tensor(atten_masks).to(torch.float16).bool().npu()
        return torch_npu.npu_fusion_attention(
            query, key, value, head_num=8, input_layout="BNSD", scale=scale, sparse_mode=sparse_params[0],
            atten_mask=atten_mask, pre_tockens=sparse_params[1], next_tockens=sparse_params[2])
    def get_atten_mask(self, sparse_mode=0, pre_tokens=65536, next_tokens=65536):
        atten_masks = []
        shape = [1, 8, 256, 256]
        if sparse_mode == 0:
            atten_mask_u = np.triu(np.ones(shape), k=next_tokens + 1)
            atten_mask_l = np.tril(np.ones(shape), k=-pre_tokens - 1)
            atten_masks = atten_mask_u + atten_mask_l
        elif sparse_mode == 1:
            atten_masks = np.zeros(shape)
            pre_tokens = 65536
            next_tokens = 65536
        elif sparse_mode == 2:
            atten_masks = np.triu(np.ones(shape), k=1)
        elif sparse_mode == 3:
            atten_masks = np.triu(np.ones(shape), k=1)
        elif sparse_mode == 4:
            atten_mask_u = np.triu(np.ones(shape), k=next_tokens + 1)
            atten_mask_l = np.tril(np.ones(shape), k=-pre_tokens - 1)
            atten_masks = atten_mask_u + atten_mask_l
        atten_mask = torch.tensor(atten_masks).to(torch.float16)
        return atten_mask
        # sparse_params = [sparse_mode, pre_tokens, next_tokens]
        # Prec and prec16 indicate the precision comparison standards for float32 and float16 respectively.
        # In this example, 0.01 is used as the standard. You can change the value as required.
    def check_result(self, query, key, value, sparse_params):
        atten_mask = self.get_atten_mask(sparse_params[0], sparse_params[1], sparse_params[2])
        output = self.supported_op_exec(query.float(), key.float(), value.float(), atten_mask)
        fa_result = self.custom_op_exec(query.npu(), key.npu(), value.npu(), sparse_params)
        self.assertRtolEqual(output.half(), fa_result[0], prec=0.01, prec16=0.01)
    def test_npu_flash_attention(self, device="npu"):
        query = torch.randn(1, 8, 256, 256, dtype=torch.float16)
        key = torch.randn(1, 8, 256, 256, dtype=torch.float16)
        value = torch.randn(1, 8, 256, 256, dtype=torch.float16)
        # sparse_params: [sparse_mode, pre_tokens, next_tokens]
        sparse_params_list = [
            [0, 128, 128],
            [1, 65536, 65536],
            [2, 65536, 0],
            [3, 65536, 0],
            [4, 128, 128]
        ]
        for sparse_params in sparse_params_list:
            self.check_result(query, key, value, sparse_params)
# --- added by npu_anywhere tests: check the numbers ---
def _check_numbers(self):
    # sparse_mode 3 at Sq == Skv and mode 4 with a symmetric band: the float64 formula
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 64, 64, dtype=torch.float16) for _ in range(3))
    mask = torch.from_numpy(np.triu(np.ones([2048, 2048]), k=1)).bool().npu()
    out = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=8,
                                         input_layout="BNSD", scale=0.125, sparse_mode=3,
                                         atten_mask=mask)[0]
    s = q.double() @ k.double().transpose(2, 3) * 0.125
    s = s.masked_fill(torch.triu(torch.ones(64, 64, dtype=torch.bool), 1), float("-inf"))
    want = torch.softmax(s, -1) @ v.double()
    assert out.dtype == torch.float16 and out.shape == (1, 8, 64, 64)
    torch.testing.assert_close(out.cpu().double(), want, rtol=2e-3, atol=2e-3)
    print("EXAMPLE OK")


TestNPUFlashAttention.test_zz_check_numbers = _check_numbers
# --- end of the added block ---

if __name__ == "__main__":
    run_tests()
