# Seed 004, torch_npu.npu_moe_gating_top_k_softmax, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
x = torch.rand((3, 3), dtype=torch.float32).to("npu")
finished = torch.randint(2, size=(3,), dtype=torch.bool).to("npu")
y, expert_idx, row_idx = torch_npu.npu_moe_gating_top_k_softmax(x, finished, k=2)

# --- added by npu_anywhere tests: check the numbers ---
# p = softmax(x, -1); y, expert_idx = top-2 of p (ties: lower expert first); finished rows route
# to expert 3 (= E); row_idx[n, j] = j * 3 + n.
x64 = x.cpu().to(torch.float64)
p = torch.exp(x64 - x64.max(-1, keepdim=True).values)
p = p / p.sum(-1, keepdim=True)
for n in range(3):
    order = sorted(range(3), key=lambda i: (-float(p[n, i]), i))[:2]
    want = [3, 3] if bool(finished[n]) else order
    assert expert_idx[n].tolist() == want, (n, expert_idx[n], want)
    torch.testing.assert_close(y[n].cpu().double(), p[n, order], rtol=1e-6, atol=1e-7)
assert row_idx.cpu().tolist() == [[0, 3], [1, 4], [2, 5]]
assert expert_idx.dtype == torch.int32 and row_idx.dtype == torch.int32
print("EXAMPLE OK")
