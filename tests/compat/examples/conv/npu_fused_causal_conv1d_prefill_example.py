# Seed 004 / op-plugin doc, torch_npu.npu_fused_causal_conv1d, 单算子模式调用 prefill场景.
# Copied unchanged.
import torch
import torch_npu

K = 3
dim = 128
batch = 4
dtype = torch.bfloat16

weight = torch.randn(K, dim, dtype=dtype).npu()
seq_lens = [15, 12, 20, 10]
cu_seq_len = sum(seq_lens)
x = torch.randn(cu_seq_len, dim, dtype=dtype).npu()
query_start_loc = torch.tensor([0, 15, 27, 47, 57], dtype=torch.int32).npu()

num_slots = 8
conv_states = torch.randn(num_slots, K - 1, dim, dtype=dtype).npu()
cache_indices = torch.tensor([0, 3, 1, 5], dtype=torch.int32).npu()
num_computed_tokens = torch.tensor([10, 5, 0, 0], dtype=torch.int32).npu()

max_query_len = max(seq_lens)
block_size = 128
conv_mode = "default"
residual_connection = 0

states_before = conv_states.clone()  # added by npu_anywhere tests (for the check below)
out = torch_npu.npu_fused_causal_conv1d(
  x,
  weight,
  conv_states,
  query_start_loc=query_start_loc,
  cache_indices=cache_indices,
  initial_state_mode=None,
  bias=None,
  num_accepted_tokens=None,
  num_computed_tokens=num_computed_tokens,
  block_idx_first_scheduled_token=None,
  block_idx_last_scheduled_token=None,
  initial_state_idx=None,
  activation="None",
  pad_slot_id=-1,
  run_mode=0,
  max_query_len=max_query_len,
  residual_connection=residual_connection,
  block_size=block_size,
  conv_mode=conv_mode,
)
print(f"output shape: {out.shape}")

# --- added by npu_anywhere tests: check the numbers ---
# Per sequence: history = the cached K - 1 rows (zeros when num_computed_tokens is 0),
# y[i] = sum_k weight[k] * cat(history, x_b)[i + k]; the cache line then holds the last K - 1
# rows of cat(history, x_b).  In float64.
w64 = weight.cpu().double()
loc = query_start_loc.tolist()
for b in range(batch):
    seq = x.cpu().double()[loc[b]:loc[b + 1]]
    line = int(cache_indices[b])
    hist = torch.zeros(K - 1, dim, dtype=torch.float64) if int(num_computed_tokens[b]) == 0 \
        else states_before.cpu().double()[line]
    padded = torch.cat([hist, seq])
    want = sum(w64[k] * padded[k:k + seq.shape[0]] for k in range(K))
    torch.testing.assert_close(out.cpu().double()[loc[b]:loc[b + 1]], want, rtol=1.6e-2,
                               atol=1e-2)
    assert torch.equal(conv_states.cpu()[line].double(), padded[-(K - 1):])
untouched = [i for i in range(num_slots) if i not in cache_indices.tolist()]
assert torch.equal(conv_states.cpu()[untouched], states_before.cpu()[untouched])
assert out.shape == x.shape and out.dtype == dtype
print("EXAMPLE OK")
