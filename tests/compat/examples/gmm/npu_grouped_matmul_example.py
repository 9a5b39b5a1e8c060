# Seed 004, torch_npu.npu_grouped_matmul, 调用示例 (单算子模式调用, 通用调用示例).  Copied from
# the documentation unchanged.
import torch
import torch_npu
x1 = torch.randn(256, 256, device='npu', dtype=torch.float16)
x2 = torch.randn(1024, 256, device='npu', dtype=torch.float16)
x3 = torch.randn(512, 1024, device='npu', dtype=torch.float16)
x = [x1, x2, x3]
weight1 = torch.randn(256, 256, device='npu', dtype=torch.float16)
weight2 = torch.randn(256, 1024, device='npu', dtype=torch.float16)
weight3 = torch.randn(1024, 128, device='npu', dtype=torch.float16)
weight = [weight1, weight2, weight3]
bias1 = torch.randn(256, device='npu', dtype=torch.float16)
bias2 = torch.randn(1024, device='npu', dtype=torch.float16)
bias3 = torch.randn(128, device='npu', dtype=torch.float16)
bias = [bias1, bias2, bias3]
group_list = None
split_item = 0
npu_out = torch_npu.npu_grouped_matmul(x, weight, bias=bias, group_list=group_list, split_item=split_item, group_type=-1)

# --- added by npu_anywhere tests: check the numbers ---
# Formula 1 (non-quantized): y_i = x_i @ weight_i + bias_i, one output per group
# (group_type=-1, split_item=0), float32 accumulation rounded once to float16.
assert isinstance(npu_out, list) and len(npu_out) == 3
for xi, wi, bi, yi in zip(x, weight, bias, npu_out):
    golden = xi.double() @ wi.double() + bi.double()
    assert yi.shape == golden.shape and yi.dtype == torch.float16, (yi.shape, yi.dtype)
    torch.testing.assert_close(yi.double(), golden, rtol=2e-3, atol=golden.abs().max().item() * 1e-3)
print("EXAMPLE OK")
