# Seed 004, torch_npu.npu_weight_quant_batchmatmul, 调用示例 / 单算子模式调用 / weight
# transpose+antiquant_scale场景 (both examples: float16 scale, then int64 scale).  Copied from the
# documentation.
import torch
import torch_npu
# 输入int8+ND
cpu_x = torch.randn((96, 320),dtype=torch.float16)
cpu_weight = torch.randint(low=-8, high=8, size=(256, 320),dtype=torch.int8)
cpu_antiquantscale = torch.randn((256,1),dtype=torch.float16)
cpu_antiquantoffset = torch.randint(-128, 127, (256,1), dtype=torch.float16)
npu_out = torch_npu.npu_weight_quant_batchmatmul(cpu_x.npu(), cpu_weight.npu().transpose(-1, -2), cpu_antiquantscale.npu().transpose(-1, -2), cpu_antiquantoffset.npu().transpose(-1, -2))

# --- added by npu_anywhere tests: check the numbers ---
# aclnnWeightQuantBatchMatmulV2: x @ ((weight + offset) * scale), the weight in float16.
def _check(out, w_deq):
    golden = cpu_x.double() @ w_deq.double()
    assert out.dtype == torch.float16 and out.shape == (96, 256), out.shape
    err = (out.cpu().double() - golden).abs() / (golden.abs().max())
    assert err.max() < 2e-3, err.max()
_check(npu_out, (cpu_weight.t().to(torch.float16) + cpu_antiquantoffset.t()) * cpu_antiquantscale.t())

cpu_x = torch.randn((96, 320),dtype=torch.float16)
cpu_weight = torch.randint(low=-8, high=8, size=(256, 320),dtype=torch.int8)
cpu_antiquantscale = torch.randn((256),dtype=torch.float16)
# 构建int64类型的scale参数
antiquant_scale = torch_npu.npu_trans_quant_param(cpu_antiquantscale.to(torch.float32).npu()).reshape(256, 1)
cpu_antiquantoffset = torch.randint(-128, 127, (256, 1), dtype=torch.int32)
npu_out = torch_npu.npu_weight_quant_batchmatmul(cpu_x.npu(), cpu_weight.transpose(-1,-2).npu(), antiquant_scale.transpose(-1,-2).npu(), cpu_antiquantoffset.transpose(-1,-2).npu())

# --- added by npu_anywhere tests: check the numbers ---
# float16 scales are exact in fp19, so the packed word carries the same scale.
_check(npu_out, ((cpu_weight.t().float() + cpu_antiquantoffset.t().float())
                 * cpu_antiquantscale.float()).to(torch.float16))
print("EXAMPLE OK")
