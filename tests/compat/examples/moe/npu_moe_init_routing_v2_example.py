# Seed 004, torch_npu.npu_moe_init_routing_v2, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
bs = 1
h = 613
k = 475
active_num = 475
expert_capacity = -1
expert_num = 226
drop_pad_mode = 0
expert_tokens_num_type = 1
expert_tokens_num_flag = True
quant_mode = -1
active_expert_range = [23, 35]
row_idx_type = 0
x = torch.randn((bs, h), dtype=torch.float32).npu()
expert_idx = torch.randint(0, expert_num, (bs, k), dtype=torch.int32).npu()
scale = torch.randn((bs,), dtype=torch.float32).npu()
offset = None
expanded_x, expanded_row_idx, expert_token_cumsum_or_count, expanded_scale = torch_npu.npu_moe_init_routing_v2(
x, expert_idx, scale=scale, offset=offset,
active_num=active_num, expert_capacity=expert_capacity, expert_num=expert_num, drop_pad_mode=drop_pad_mode,
expert_tokens_num_type=expert_tokens_num_type, expert_tokens_num_flag=expert_tokens_num_flag,
active_expert_range=active_expert_range, quant_mode=quant_mode, row_idx_type=row_idx_type)

# --- added by npu_anywhere tests: check the numbers ---
# Only experts in [23, 35) are routed: they come first, in (expert, flat position) order;
# expanded_row_idx[src] = dst for them, -1 for the others; counts per expert 23..34.
ids = expert_idx.cpu().reshape(-1).tolist()
routed = sorted((e, i) for i, e in enumerate(ids) if 23 <= e < 35)
want_row_idx = [-1] * k
for dst, (_, src) in enumerate(routed):
    want_row_idx[src] = dst
assert expanded_row_idx.cpu().tolist() == want_row_idx
assert expert_token_cumsum_or_count.cpu().tolist() == [ids.count(e) for e in range(23, 35)]
assert expanded_x.shape == (active_num, h)
for dst in range(len(routed)):
    assert torch.equal(expanded_x[dst].cpu(), x[0].cpu())
    assert float(expanded_scale[dst]) == float(scale[0])
print("EXAMPLE OK")
