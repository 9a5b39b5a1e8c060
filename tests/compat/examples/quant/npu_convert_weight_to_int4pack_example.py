# Seed 004, torch_npu.npu_convert_weight_to_int4pack, 调用示例 / 单算子模式调用.  Copied from the
# documentation; the indentation the seed text lost was restored, and the last statement (a call
# of torch_npu.npu_weight_quant_batchmatmul, a different op outside the quant family that
# npu_anywhere does not implement yet) was left out.
import torch
import torch_npu
m = 128
k = 64
n = 32
trans_weight = False
cpu_x = torch.randn((m, k), dtype=torch.float16)
if trans_weight:
    cpu_weight = torch.randint(low=-8, high=8, size=(n, k), dtype=torch.int32)
    cpu_antiquantscale = torch.randn((n, 1), dtype=torch.float16)
    cpu_antiquantoffset = torch.randn((n, 1), dtype=torch.float16)
else:
    cpu_weight = torch.randint(low=-8, high=8, size=(k, n), dtype=torch.int32)
    cpu_antiquantscale = torch.randn((1, n), dtype=torch.float16)
    cpu_antiquantoffset = torch.randn((1, n), dtype=torch.float16)
weight_int4 = torch_npu.npu_convert_weight_to_int4pack(cpu_weight.npu())
if trans_weight:
    cpu_weight = cpu_weight.transpose(-1, -2)
    weight_int4 = weight_int4.transpose(-1, -2)
    cpu_antiquantscale = cpu_antiquantscale.transpose(-1, -2)
    cpu_antiquantoffset = cpu_antiquantoffset.transpose(-1, -2)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: every 8 int4 values are carried by one int32, shape (k, n/8).  op-plugin's golden
# (test_npu_convert_weight_to_int4pack.py pack_int4_3dim): value 8i+j sits in bits 4j..4j+3.
assert weight_int4.dtype == torch.int32 and weight_int4.shape == (k, n // 8), weight_int4.shape
w = cpu_weight.to(torch.int64).reshape(k, n // 8, 8) & 0xF
expected = sum(w[..., j] << (4 * j) for j in range(8))
expected = torch.where(expected >= 2 ** 31, expected - 2 ** 32, expected).to(torch.int32)
assert torch.equal(weight_int4.cpu(), expected), (weight_int4, expected)
print("EXAMPLE OK")
