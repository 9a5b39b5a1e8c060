# Seed 004, torch_npu.npu_moe_gating_top_k, 调用示例 (单算子模式调用).  Copied from the
# documentation; only the indentation that the seed text lost was restored.  (The 图模式调用
# example needs torchair, which is not emulated.)
import torch
import torch_npu
import numpy
k = 1
k_group = 4
group_count = 8
group_select_mode = 1
renorm = 0
norm_type = 1
out_flag = False
routed_scaling_factor = 1.0
eps = 1e-20
# 生成随机数据, 并发送到npu
x = numpy.random.uniform(0, 2, (16, 256)).astype(numpy.float16)
bias = numpy.random.uniform(0, 2, (256,)).astype(numpy.float16)
x_tensor = torch.tensor(x).npu()
bias_tensor = torch.tensor(bias).npu()
# 调用MoeGatingTopK算子
y_npu, expert_idx_npu, out_npu = torch_npu.npu_moe_gating_top_k(x_tensor, k, bias=bias_tensor, k_group=k_group, group_count=group_count, group_select_mode=group_select_mode, renorm=renorm, norm_type=norm_type, out_flag=out_flag, routed_scaling_factor=routed_scaling_factor, eps=eps)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004 / op-plugin golden: s = sigmoid(x); score = s + bias; 8 groups of 32, group score =
# sum of its 2 largest scores; keep the 4 best groups; expert = the best score among them
# (ties: lower index first); y = s[expert] / (s[expert] + eps) * routed_scaling_factor.
s = 1 / (1 + numpy.exp(-x.astype(numpy.float64)))
score = s + bias.astype(numpy.float64)
for n in range(16):
    groups = score[n].reshape(8, 32)
    group_score = numpy.sort(groups, axis=-1)[:, -2:].sum(-1)
    kept = sorted(range(8), key=lambda g: (-group_score[g], g))[:k_group]
    candidates = [i for g in kept for i in range(g * 32, g * 32 + 32)]
    best = sorted(candidates, key=lambda i: (-score[n, i], i))[:k]
    assert expert_idx_npu[n].tolist() == best, (n, expert_idx_npu[n], best)
    want = s[n, best] / (s[n, best].sum() + eps) * routed_scaling_factor
    numpy.testing.assert_allclose(y_npu[n].cpu().double().numpy(), want, rtol=1e-3, atol=0)
assert y_npu.shape == (16, 1) and y_npu.dtype == torch.float16
assert expert_idx_npu.dtype == torch.int32
assert out_npu.shape == (16, 256) and out_npu.dtype == torch.float32
print("EXAMPLE OK")
