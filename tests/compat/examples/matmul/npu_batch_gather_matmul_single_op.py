# Seed 004, torch_npu.npu_batch_gather_matmul and torch_npu.npu_batch_gather_matmul_ (both
# pages give this example), 调用示例 / 单算子调用.  Copied from the documentation unchanged
# but for one marked line.  (The 图模式调用 example needs torchair, which is not emulated.)
# Its weight_a [2, 1, 16, 4096] does not have the documented [W, L, R, H1] = [2, 1, 16, 16]
# shape; as on the NPU, its first W*L*R*H1 elements are read as that packed array.
import numpy as np
import torch
import torch_npu
x_data=torch.from_numpy(np.random.uniform(-1, 1, (4096, 16)).astype(np.float16)).npu()
y_data = torch.from_numpy(np.ones((4096, 6144)).astype(np.float16)).npu()
wa_t_all_data =torch.from_numpy(np.random.uniform(-1, 1, (2, 1, 16, 4096)).astype(np.float16)).npu()
wb_t_all_data =torch.from_numpy(np.random.uniform(-1, 1, (2, 1, 4096, 16)).astype(np.float16)).npu()
indices_data =torch.from_numpy(np.random.randint(-1, 2, size=4096).reshape(4096).astype(np.int32)).npu()
pred=torch_npu.npu_batch_gather_matmul(y_data,x_data,wb_t_all_data,indices_data,wa_t_all_data,y_slice_size=4096,scale=1e-3,y_offset=0,layer_idx=0)
y_before = y_data.cpu().clone()  # added: the in-place call below changes y_data again
torch_npu.npu_batch_gather_matmul_(y_data,x_data,wb_t_all_data,indices_data,wa_t_all_data,y_slice_size=4096,scale=1e-3,y_offset=0,layer_idx=0)
print(y_data)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnAddLora: y[i, 0:H2] += (x[i] @ wa[w, 0]^T) @ wb[w, 0]^T * scale for w = indices[i] >= 0,
# wa read as its first W*L*R*H1 elements ([2, 1, 16, 16]); float64 formula, token by token.
# As on the NPU, the out-of-place call adds into y_data as well and returns it (the kernel's
# output reuses y's address), so the in-place call adds the product a second time.
x64, idx = x_data.cpu().double(), indices_data.cpu().tolist()
wa64 = wa_t_all_data.cpu().reshape(-1)[:2 * 16 * 16].view(2, 1, 16, 16).double()
wb64 = wb_t_all_data.cpu().double()
delta = torch.zeros(4096, 6144, dtype=torch.float64)
for i, w in enumerate(idx):
    if w >= 0:
        delta[i, :4096] = (wb64[w, 0] @ (wa64[w, 0] @ x64[i])) * 1e-3
assert pred is y_data and pred.shape == (4096, 6144) and pred.dtype == torch.float16
for got, golden in ((y_before, 1 + delta), (y_data.cpu(), y_before.double() + delta)):
    err = (got.double() - golden).abs().max().item()
    assert err <= 1e-3, err            # one float16 ulp of 1.0 is 2**-10
skipped = [i for i, w in enumerate(idx) if w < 0]
assert torch.equal(y_data.cpu()[skipped], torch.ones(len(skipped), 6144, dtype=torch.float16))
print("EXAMPLE OK")
