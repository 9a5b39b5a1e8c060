# Seed 004, torch_npu.npu_grouped_matmul_finalize_routing, 调用示例 (单算子调用).  Copied from
# the documentation with two changes: k and n are 256 and 512 instead of 2048 and 7168 (the
# documented int8 shapes take minutes on a CPU), and scipy's softmax (scipy is not a
# dependency) is the same formula written with numpy.
import numpy as np
import torch
import torch_npu


def softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


m, k, n = 576, 256, 512
batch = 72
topK = 8
group_num = 8
x = np.random.randint(-10, 10, (m, k)).astype(np.int8)
weight = np.random.randint(-10, 10, (group_num, k, n)).astype(np.int8)
scale = np.random.normal(0, 0.01, (group_num, n)).astype(np.float32)
pertoken_scale = np.random.normal(0, 0.01, (m, )).astype(np.float32)
group_list = np.array([batch] * group_num, dtype=np.int64)
shared_input = np.random.normal(0, 0.1, (batch // 4, n)).astype(np.float32)
logit_ori = np.random.normal(0, 0.1, (batch, group_num)).astype(np.float32)
routing = np.argsort(logit_ori, axis=1)[:, -topK:].astype(np.int32)
logit = softmax(logit_ori[np.arange(batch).reshape(-1, 1).repeat(topK, axis=1), routing], axis=1).astype(np.float32)
logit = logit.reshape(m)
row_index = (np.argsort(routing.reshape(-1)) // topK).astype(np.int64)
x_clone = torch.from_numpy(x).npu()
weight_clone = torch.from_numpy(weight).npu()
weightNz = torch_npu.npu_format_cast(weight_clone, 29)
scale_clone = torch.from_numpy(scale).npu()
pertoken_scale_clone = torch.from_numpy(pertoken_scale).npu()
group_list_clone = torch.from_numpy(group_list).npu()
shared_input_clone = torch.from_numpy(shared_input).to(torch.bfloat16).npu()
logit_clone = torch.from_numpy(logit).npu()
row_index_clone = torch.from_numpy(row_index).npu()
shared_input_offset = batch // 2
output_bs = batch
y = torch_npu.npu_grouped_matmul_finalize_routing(x_clone, weightNz,
group_list_clone, scale=scale_clone, pertoken_scale=pertoken_scale_clone,
shared_input=shared_input_clone, logit=logit_clone, row_index=row_index_clone,
shared_input_offset=shared_input_offset, output_bs=output_bs)

# --- added by npu_anywhere tests: check the numbers ---
# mm[r] = (x[r] @ w[e(r)]) * scale[e(r)] * pertoken_scale[r]; y[row_index[r]] += mm[r] * logit[r];
# y[offset : offset + batch/4] += 1.0 * shared_input (bfloat16 values), all in float64 here.
assert y.shape == (batch, n) and y.dtype == torch.float32, (y.shape, y.dtype)
x64 = torch.from_numpy(x).long()
w64 = torch.from_numpy(weight).long()
mm = torch.cat([(x64[e * batch:(e + 1) * batch] @ w64[e]).double() * torch.from_numpy(scale[e]).double()
                for e in range(group_num)])
mm = mm * torch.from_numpy(pertoken_scale).double()[:, None] * torch.from_numpy(logit).double()[:, None]
golden = torch.zeros(batch, n, dtype=torch.float64).index_add_(0, torch.from_numpy(row_index), mm)
golden[shared_input_offset:shared_input_offset + batch // 4] += \
    torch.from_numpy(shared_input).to(torch.bfloat16).double()
torch.testing.assert_close(y.double(), golden, rtol=1e-4, atol=golden.abs().max().item() * 1e-5)
print("EXAMPLE OK")
