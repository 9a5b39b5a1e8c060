# Seed 004, torch_npu.npu_moe_compute_expert_tokens, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
sorted_experts = torch.tensor([3,3,4,5,6,7], dtype=torch.int32)
num_experts = 5
output = torch_npu.npu_moe_compute_expert_tokens(sorted_experts.npu(), num_experts)

# --- added by npu_anywhere tests: check the numbers ---
# expert_tokens[e] = #{i : sorted_experts[i] <= e} (one past the last row of expert e).
assert output.dtype == torch.int32
assert output.cpu().tolist() == [sum(1 for v in [3, 3, 4, 5, 6, 7] if v <= e) for e in range(5)]
print("EXAMPLE OK")
