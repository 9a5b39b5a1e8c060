# Seed 004, torch_npu.npu_recurrent_gated_delta_rule, 调用示例 / 单算子模式调用.  Copied from the
# documentation unchanged, except one marked line that keeps a copy of state before the call
# (the op overwrites it).  (The 静态图模式调用 example of op-plugin's doc needs torchair.)
import torch
import torch_npu
# 构造输入
bs, mtp, nk, nv, dk, dv = (2, 3, 4, 8, 128, 128)
actual_seq_lengths = (torch.ones(bs) * mtp).npu().to(torch.int32)
T = int(torch.sum(actual_seq_lengths))
state = torch.rand((T, nv, dv, dk), dtype=torch.bfloat16).npu()
query = torch.rand((T, nk, dk), dtype=torch.bfloat16).npu()
key = torch.rand((T, nk, dk), dtype=torch.bfloat16).npu()
value = torch.rand((T, nv, dv), dtype=torch.bfloat16).npu()
g = torch.rand((T, nv), dtype=torch.float32).npu() * (-1.0)
beta = torch.rand((T, nv), dtype=torch.bfloat16).npu()
ssm_state_indices = (torch.arange(T).npu()).to(torch.int32)
query = torch.nn.functional.normalize(query, p=2, dim=-1)
key = torch.nn.functional.normalize(key, p=2, dim=-1)
scale = dk ** -0.5
num_accepted_tokens = (torch.randint(1, mtp + 1, (bs,)).npu()).to(torch.int32)
state_before = state.clone()  # added by npu_anywhere tests: the call below overwrites state
# 调用算子
o = torch_npu.npu_recurrent_gated_delta_rule(
query, key, value, state, beta=beta, scale=scale,
actual_seq_lengths=actual_seq_lengths, ssm_state_indices=ssm_state_indices,
num_accepted_tokens=num_accepted_tokens, g=g, gk=None)
print(o)

# --- added by npu_anywhere tests: check the numbers ---
# op-plugin's doc, per sequence i (tokens s_i .. s_i + 2) and value head h (key head h // 2):
#   S = state[ssm[s_i + num_accepted_tokens[i] - 1]];  for each token t:
#   S = exp(g_t) S;  S = S + beta_t (v_t - S k_t) k_t^T;  o_t = S (scale q_t);  state[ssm[t]] = S
f64 = torch.float64
q64, k64, v64 = query.cpu().to(f64), key.cpu().to(f64), value.cpu().to(f64)
g64, b64 = g.cpu().to(f64), beta.cpu().to(f64)
heads = torch.arange(nv) // (nv // nk)
want_o = torch.zeros(T, nv, dv, dtype=f64)
want_state = state_before.cpu().to(f64).clone()
slots = ssm_state_indices.cpu().tolist()
for i in range(bs):
    start = i * mtp
    s = state_before.cpu().to(f64)[slots[start + int(num_accepted_tokens[i]) - 1]]
    for t in range(start, start + mtp):
        kt, qt = k64[t, heads], q64[t, heads]                      # (nv, dk)
        s = torch.exp(g64[t])[:, None, None] * s
        delta = b64[t][:, None] * (v64[t] - torch.einsum("hvk,hk->hv", s, kt))
        s = s + delta[:, :, None] * kt[:, None, :]
        want_o[t] = torch.einsum("hvk,hk->hv", s, scale * qt)
        want_state[slots[t]] = s
assert o.dtype == torch.bfloat16 and o.shape == (T, nv, dv)
torch.testing.assert_close(o.cpu().to(f64), want_o, rtol=2e-2, atol=2e-2)
torch.testing.assert_close(state.cpu().to(f64), want_state, rtol=2e-2, atol=2e-2)
print("EXAMPLE OK")
