# Seed 004, torch_npu.npu_convert_weight_to_int4pack, 调用示例 / 单算子模式调用.  Copied from the
# documentation; the indentation the seed text lost was restored.
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
npu_out = torch_npu.npu_weight_quant_batchmatmul(cpu_x.npu(), weight_int4.npu(), cpu_antiquantscale.npu(), cpu_antiquantoffset.npu())

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: every 8 int4 values are carried by one int32, shape (k, n/8).  op-plugin's golden
# (test_npu_convert_weight_to_int4pack.py pack_int4_3dim): value 8i+j sits in bits 4j..4j+3.
assert weight_int4.dtype == torch.int32 and weight_int4.shape == (k, n // 8), weight_int4.shape
w = cpu_weight.to(torch.int64).reshape(k, n // 8, 8) & 0xF
expected = sum(w[..., j] << (4 * j) for j in range(8))
expected = torch.where(expected >= 2 ** 31, expected - 2 ** 32, expected).to(torch.int32)
assert torch.equal(weight_int4.cpu(), expected), (weight_int4, expected)
# npu_weight_quant_batchmatmul (aclnnWeightQuantBatchMatmulV2): x @ ((w + offset) * scale), the
# dequantized weight in float16 as op-plugin's golden computes it, accumulated in float64 here.
w_deq = (cpu_weight.to(torch.float16) + cpu_antiquantoffset) * cpu_antiquantscale
golden = cpu_x.double() @ w_deq.double()
assert npu_out.dtype == torch.float16 and npu_out.shape == (m, n), npu_out.shape
err = (npu_out.cpu().double() - golden).abs() / (golden.abs() + 1)
assert err.max() < 4e-3, err.max()
print("EXAMPLE OK")
