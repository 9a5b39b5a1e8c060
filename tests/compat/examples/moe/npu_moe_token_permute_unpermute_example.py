# Seed 004, torch_npu.npu_moe_token_permute and npu_moe_token_unpermute, 调用示例 (the two
# pages' examples share their inputs; run here in one script).
import torch
import torch_npu
dtype = torch.bfloat16
tokens = torch.tensor([[1, 1, 1], [2, 2, 2], [3, 3, 3], [0, 0, 0]]).npu().to(dtype)
indices = torch.tensor([[0, 4], [4, 3], [4, 2], [1, 1]]).npu()
num_out_tokens = indices.numel()
probs = torch.ones_like(indices) / 2
probs = probs.npu().to(dtype)
permuted_tokens, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices, num_out_tokens)
unpermuted_tokens = torch_npu.npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=probs)

# --- added by npu_anywhere tests: check the numbers ---
# Stable argsort of indices.flat = [0, 4, 4, 3, 4, 2, 1, 1] -> [0, 6, 7, 5, 3, 1, 2, 4];
# permuted_tokens = tokens[perm // 2]; sorted_indices = the inverse permutation;
# unpermute sums the two halves back: every token comes back unchanged.
perm = [0, 6, 7, 5, 3, 1, 2, 4]
assert torch.equal(permuted_tokens.cpu(), tokens.cpu()[[p // 2 for p in perm]])
inv = [perm.index(i) for i in range(8)]
assert sorted_indices.dtype == torch.int32 and sorted_indices.cpu().tolist() == inv
assert torch.equal(unpermuted_tokens.cpu(), tokens.cpu())
print("EXAMPLE OK")
