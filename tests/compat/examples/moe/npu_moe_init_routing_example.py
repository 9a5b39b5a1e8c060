# Seed 004, torch_npu.npu_moe_init_routing, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
x = torch.tensor([[0.1, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2],[0.3, 0.3, 0.3, 0.3]], dtype=torch.float32).to("npu")
row_idx = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32).to("npu")
expert_idx = torch.tensor([[1, 2], [0, 1], [0, 2]], dtype=torch.int32).to("npu")
active_num = 3
expanded_x, expanded_row_idx, expanded_expert_idx = torch_npu.npu_moe_init_routing(x, row_idx, expert_idx, active_num)

# --- added by npu_anywhere tests: check the numbers ---
# Stable sort of expert_idx.flat = [1, 2, 0, 1, 0, 2] -> positions [2, 4, 0, 3, 1, 5];
# sorted_row_idx = row_idx.flat at those = [1, 2, 0, 4, 3, 5]; expanded_row_idx[sorted_row_idx[i]] = i;
# expanded_x[i] = x[sorted_row_idx[i] % 3].
assert expanded_expert_idx.cpu().tolist() == [0, 0, 1, 1, 2, 2]
assert expanded_row_idx.cpu().tolist() == [2, 0, 1, 4, 3, 5]
rows = [1, 2, 0, 1, 0, 2]
assert torch.equal(expanded_x.cpu(), x.cpu()[rows])
print("EXAMPLE OK")
