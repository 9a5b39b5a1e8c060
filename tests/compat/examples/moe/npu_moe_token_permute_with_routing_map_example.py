# Seed 004, torch_npu.npu_moe_token_permute_with_routing_map, 调用示例 (its first line,
# "import torch,torch_npu", written as two imports).
import torch
import torch_npu
x = torch.randn((3, 4), dtype=torch.float).npu()
rounting_map = torch.tensor(
[[True, True], [True, True], [True, True]], dtype=torch.bool).npu()
numtoken = 6
pad_mode = False
permuted_tokens_out, _, sorted_indices_out = torch_npu.npu_moe_token_permute_with_routing_map(x, rounting_map, num_out_tokens=numtoken, drop_and_pad=pad_mode)

# --- added by npu_anywhere tests: check the numbers ---
# topK = 6 // 3 = 2; Megatron's permute groups the tokens by expert (expert 0: tokens 0, 1, 2;
# expert 1: tokens 0, 1, 2); sorted_indices_out[t*2 + k] is the row of token t's k-th expert.
rows = [0, 1, 2, 0, 1, 2]
xd = x.cpu().double()
assert permuted_tokens_out.shape == (6, 4) and permuted_tokens_out.dtype == torch.float
assert torch.equal(permuted_tokens_out.cpu().double(), xd[rows])
assert sorted_indices_out.dtype == torch.int32
assert sorted_indices_out.cpu().tolist() == [0, 3, 1, 4, 2, 5]
# drop_and_pad with probs, as op-plugin's golden test calls it: capacity 3 // 2 = 1.
probs = torch.tensor([[0.5, 0.25], [0.75, 0.5], [0.125, 1.0]]).npu()
padded_map = torch.tensor([[True, False], [True, True], [True, True]]).npu()
out, out_probs, index = torch_npu.npu_moe_token_permute_with_routing_map(
    x, padded_map, probs=probs, num_out_tokens=3, drop_and_pad=True)
assert index.cpu().tolist() == [0, 1]                  # first routed token of each expert
assert torch.equal(out.cpu().double(), xd[[0, 1]])
assert out_probs.cpu().tolist() == [0.5, 0.5]
print("EXAMPLE OK")
