# Seed 004, torch_npu.npu_advance_step_flashattn, 调用示例 / 投机场景.  Copied from the
# documentation; only the lost indentation of the call's continuation lines is restored.

# --- added by npu_anywhere tests: a fixed seed ---
# The example sizes block_tables from the old seq_lens, while the new positions reach
# old + accepted_num + 1: the kernel then reads on into the next row of the table, and for the
# last request possibly past its end (unrelated memory on the NPU; an IndexError here).  A
# fixed seed keeps the example deterministic and inside the table.
import numpy as np
np.random.seed(2)
# --- end of the addition ---

import numpy as np
import torch
import torch_npu
num_seqs = 16
num_queries = 16
block_size = 8
spec_num = 2
input_tokens = np.random.randint(10, size=(num_seqs*(1 + spec_num),))
sampled_token_ids = np.random.randint(10, size=(num_seqs, 1 + spec_num))
input_positions = np.random.randint(10, size=(num_seqs*(1 + spec_num),))
seq_lens = np.random.randint(10, size=(num_seqs*(1 + spec_num),))
slot_mapping = np.random.randint(10, size=(num_seqs*(1 + spec_num),))
spec_token = np.random.randint(10, size=(num_seqs, spec_num))
accepted_num = np.random.randint(10, size=(num_seqs,))
input_tokens = torch.tensor(input_tokens, dtype=torch.int64, device="npu")
sampled_token_ids = torch.tensor(sampled_token_ids, dtype=torch.int64, device="npu")
input_positions = torch.tensor(input_positions, dtype=torch.int64, device="npu")
seq_lens = torch.tensor(seq_lens, dtype=torch.int64, device="npu")
slot_mapping = torch.tensor(slot_mapping, dtype=torch.int64, device="npu")
spec_token = torch.tensor(spec_token, dtype=torch.int64, device="npu")
accepted_num = torch.tensor(accepted_num, dtype=torch.int64, device="npu")
max_seq_len = seq_lens.max().item()
block_tables = np.random.randint(10, size=(num_seqs, max_seq_len // block_size + 1))
block_tables = torch.tensor(block_tables, dtype=torch.int64, device="npu")
torch_npu.npu_advance_step_flashattn(input_tokens, sampled_token_ids, input_positions,
    seq_lens, slot_mapping, block_tables, num_seqs,
    num_queries, block_size, spec_token=spec_token, accepted_num=accepted_num)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnAdvanceStepV2 (kernel advance_step_spec.h), request i, token j, k = i * (1 + spec_num) + j:
#     input_positions[k] = old + accepted_num[i] + 1;   seq_lens[k] = input_positions[k] + 1
#     slot_mapping[k] = blockTables.flatten()[i * W + pos // block_size] * block_size
#                       + pos % block_size                          (W = block_tables.shape[1])
#     input_tokens[k0] = sampled[i][m - 1] (m = first index of the minimum of sampled[i] + [-1]),
#                        -1 when m == 0;   the next spec_num entries = spec_token[i]
# The example's names were rebound, so the old positions are recovered from the new ones.
per = 1 + spec_num
flat = block_tables.reshape(-1).tolist()
width = block_tables.shape[1]
for i in range(num_seqs):
    row = sampled_token_ids[i].tolist() + [-1]
    m = row.index(min(row))
    assert int(input_tokens[i * per]) == (-1 if m == 0 else row[m - 1]), i
    assert input_tokens[i * per + 1:(i + 1) * per].tolist() == spec_token[i].tolist(), i
    for j in range(per):
        k = i * per + j
        pos = int(input_positions[k])
        assert 0 <= pos - int(accepted_num[i]) - 1 < 10, (i, j)
        assert int(seq_lens[k]) == pos + 1, (i, j)
        assert int(slot_mapping[k]) == flat[i * width + pos // block_size] * block_size \
            + pos % block_size, (i, j)
print("EXAMPLE OK")
