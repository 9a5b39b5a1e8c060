# Seed 004, torch_npu.npu_advance_step_flashattn, 调用示例 / 非投机场景.  Copied from the
# documentation unchanged.
import numpy as np
import torch
import torch_npu
num_seqs = 16
num_queries = 8
block_size = 8
input_tokens = np.random.randint(10, size=(num_seqs,))
sampled_token_ids = np.random.randint(10, size=(num_queries,1))
input_positions = np.random.randint(10, size=(num_seqs,))
seq_lens = np.random.randint(10, size=(num_seqs,))
slot_mapping = np.random.randint(10, size=(num_seqs,))
input_tokens = torch.tensor(input_tokens, dtype=torch.int64, device="npu")
sampled_token_ids = torch.tensor(sampled_token_ids, dtype=torch.int64, device="npu")
input_positions = torch.tensor(input_positions, dtype=torch.int64, device="npu")
seq_lens = torch.tensor(seq_lens, dtype=torch.int64, device="npu")
slot_mapping = torch.tensor(slot_mapping, dtype=torch.int64, device="npu")
max_seq_len = seq_lens.max().item()
block_tables = np.random.randint(10, size=(num_seqs, max_seq_len // block_size + 1))
block_tables = torch.tensor(block_tables, dtype=torch.int64, device="npu")
torch_npu.npu_advance_step_flashattn(input_tokens, sampled_token_ids, input_positions, seq_lens, slot_mapping, block_tables, num_seqs, num_queries, block_size)

# --- added by npu_anywhere tests: check the numbers ---
# The example rebinds its names, so the values before the call are gone; the documented
# formula is checked through what it implies.  For query i < num_queries, p = the old seq_lens[i]:
#     input_tokens[i] = sampled_token_ids[i];  input_positions[i] = p;  seq_lens[i] = p + 1
#     slot_mapping[i] = (blockTables[p // block_size] + blockTablesStride * i) * block_size
#                       + p % block_size        (blockTables read flat, stride = its row length)
# and for the padded sequences: input_tokens 0, input_positions 0, slot_mapping -1.
flat = block_tables.reshape(-1).tolist()
stride = block_tables.shape[1]
for i in range(num_queries):
    p = int(seq_lens[i]) - 1
    assert 0 <= p < 10, (i, p)
    assert int(input_tokens[i]) == int(sampled_token_ids[i, 0]), i
    assert int(input_positions[i]) == p, i
    assert int(slot_mapping[i]) == (flat[p // block_size] + stride * i) * block_size \
        + p % block_size, i
for i in range(num_queries, num_seqs):
    assert (int(input_tokens[i]), int(input_positions[i]), int(slot_mapping[i])) == (0, 0, -1), i
    assert 0 <= int(seq_lens[i]) < 10, "padded seq_lens are left alone"
print("EXAMPLE OK")
