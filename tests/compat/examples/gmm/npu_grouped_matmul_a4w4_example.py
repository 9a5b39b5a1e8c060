# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_grouped_matmul.md, 调用示例 (单算子模式调用,
# x为int4输入，weight的数据类型为int4数据排布格式为NZ).  Copied from the documentation unchanged.
import numpy as np
import torch
import torch_npu

E, K, N = 1, 16, 64
x = torch.randint(10, (15, 16), dtype=torch.int8).npu()
weight = torch.randint(10, (1, 16, 64), dtype=torch.int8).npu()

x_quant = torch_npu.npu_quantize(x.to(torch.float32), torch.tensor([1.]).npu(), None, torch.quint4x2, -1, False)
weight_nz = torch_npu.npu_format_cast(weight.to(torch.float32), 29)
weight_quant = torch_npu.npu_quantize(weight_nz, torch.tensor([1.]).npu(), None, torch.quint4x2, -1, False)

scale = torch.rand((E, 1, N), dtype=torch.float32).npu()

k_group = scale.shape[1]
scale_np = scale.cpu().numpy()
scale_uint32 = scale_np.astype(np.float32)
scale_uint32.dtype = np.uint32
scale_uint64 = np.zeros((E, k_group, N * 2), dtype=np.uint32)
scale_uint64[...,::2] = scale_uint32
scale_uint64.dtype = np.int64
scale = torch.from_numpy(scale_uint64).npu()

group_list = torch.Tensor([14]).to(torch.int64).npu()
per_token_scale = torch.rand((15), dtype=torch.float32).npu()

output = torch_npu.npu_grouped_matmul([x_quant], [weight_quant], scale=[scale], per_token_scale=[per_token_scale],
                                        group_list=group_list, group_list_type=0, group_type=0,
                                        split_item=3, output_dtype=torch.float16)

# --- added by npu_anywhere tests: check the numbers ---
# Formula 3-3 (A4W4): y = x @ (weight * scale) * per_token_scale over the 14 rows group_list
# covers (row 14 takes part in no matmul: zero here).  npu_quantize to quint4x2 saturates the
# 0..9 inputs to int4's [-8, 7]; the fixpipe keeps the fp19 bits of each float32 scale.
xq = x.cpu().double().clamp(-8, 7)
wq = weight.cpu().double().clamp(-8, 7)[0]
s32 = torch.from_numpy(scale_np).reshape(N)
s19 = (s32.view(torch.int32) & -8192).view(torch.float32).double()
golden = (xq[:14] @ (wq * s19)) * per_token_scale.cpu().double()[:14, None]
y = output[0]
assert len(output) == 1 and y.shape == (15, N) and y.dtype == torch.float16, (y.shape, y.dtype)
torch.testing.assert_close(y[:14].cpu().double(), golden, rtol=2e-3, atol=1e-3)
assert (y[14].cpu() == 0).all()
print("EXAMPLE OK")
