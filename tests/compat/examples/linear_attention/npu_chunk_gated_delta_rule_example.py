# Seed 004, torch_npu.npu_chunk_gated_delta_rule, 调用示例 / 单算子模式调用.  Copied from the
# documentation unchanged.  (The 图模式调用 example of op-plugin's doc needs torchair.)
import torch
import torch_npu
# 构造输入
B, seqlen, nk, nv, dk, dv = (2, 100, 4, 8, 128, 128)
actual_seq_lengths = (torch.ones(B) * seqlen).to("npu").to(torch.int32)
T = int(torch.sum(actual_seq_lengths))
state = torch.rand((B, nv, dv, dk), dtype=torch.bfloat16).npu()
query = torch.rand((T, nk, dk), dtype=torch.bfloat16).npu()
key = torch.rand((T, nk, dk), dtype=torch.bfloat16).npu()
value = torch.rand((T, nv, dv), dtype=torch.bfloat16).npu()
g = torch.rand((T, nv), dtype=torch.float32).npu() * (-1.0)
beta = torch.rand((T, nv), dtype=torch.bfloat16).npu()
query = torch.nn.functional.normalize(query, p=2, dim=-1)
key = torch.nn.functional.normalize(key, p=2, dim=-1)
scale = dk ** -0.5
# 调用算子
o, final_state = torch_npu.npu_chunk_gated_delta_rule(
query, key, value,
beta=beta,
initial_state=state,
actual_seq_lengths=actual_seq_lengths,
scale=scale,
g=g)
print(o.shape, final_state.shape)

# --- added by npu_anywhere tests: check the numbers ---
# op-plugin's doc, token by token in float64 for each sequence b (tokens 100 b .. 100 b + 99) and
# value head h (key head h // 2), from S = state[b]:
#   S = exp(g_t) S;  S = S + beta_t (v_t - S k_t) k_t^T;  o_t = S (q_t scale);  final_state[b] = S
f64 = torch.float64
q64, k64, v64 = query.cpu().to(f64), key.cpu().to(f64), value.cpu().to(f64)
g64, b64 = g.cpu().to(f64), beta.cpu().to(f64)
heads = torch.arange(nv) // (nv // nk)
want_o = torch.zeros(T, nv, dv, dtype=f64)
want_final = torch.zeros(B, nv, dv, dk, dtype=f64)
for b in range(B):
    s = state.cpu().to(f64)[b]
    for t in range(b * seqlen, (b + 1) * seqlen):
        kt, qt = k64[t, heads], q64[t, heads]
        s = torch.exp(g64[t])[:, None, None] * s
        delta = b64[t][:, None] * (v64[t] - torch.einsum("hvk,hk->hv", s, kt))
        s = s + delta[:, :, None] * kt[:, None, :]
        want_o[t] = torch.einsum("hvk,hk->hv", s, qt * scale)
    want_final[b] = s
assert o.shape == (T, nv, dv) and final_state.shape == (B, nv, dv, dk)
assert o.dtype == torch.bfloat16 and final_state.dtype == torch.bfloat16
torch.testing.assert_close(o.cpu().to(f64), want_o, rtol=2e-2, atol=2e-2)
torch.testing.assert_close(final_state.cpu().to(f64), want_final, rtol=2e-2, atol=2e-2)
print("EXAMPLE OK")
