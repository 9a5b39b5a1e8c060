# seed 004, npu_dense_lightning_indexer_softmax_lse, 调用示例 (copied as is).
import torch
import torch_npu
B = 1
N1 = 64
N2 = 1
S1 = 128
S2 = 256
D = 128
output_dtype = torch.float16
q_index = torch.randn(B, S1, N1, D, dtype=output_dtype, device=torch.device('npu'))
k_index = torch.randn(B, S2, N2, D, dtype=output_dtype, device=torch.device('npu'))
weights = torch.randn(B, S1, N1, dtype=output_dtype, device=torch.device('npu'))
actual_seq_qlen = None
actual_seq_klen = None
input_layout = 'BSND'
sparse_mode = 3
softmax_max_index, softmax_sum_index = torch_npu.npu_dense_lightning_indexer_softmax_lse(q_index, k_index, weights, actual_seq_qlen=actual_seq_qlen, actual_seq_klen=actual_seq_klen, layout=input_layout, sparse_mode=sparse_mode)

# --- added by npu_anywhere tests: check the numbers ---
# res[s, t] = sum_h w[s, h] relu(q[s, h] . k[t]) for t <= S2 - S1 + s (rightDownCausal), float64.
q, k, w = q_index.cpu().double()[0], k_index.cpu().double()[0, :, 0], weights.cpu().double()[0]
res = (torch.relu(torch.einsum("shd,td->sht", q, k)) * w[:, :, None]).sum(1)
hidden = torch.arange(S2)[None, :] > (S2 - S1 + torch.arange(S1))[:, None]
res = res.masked_fill(hidden, float("-inf"))
mx = res.max(-1).values
sm = torch.exp(res - mx[:, None]).sum(-1)
assert softmax_max_index.shape == (B, N2, S1) and softmax_max_index.dtype == torch.float32
torch.testing.assert_close(softmax_max_index.cpu().double()[0, 0], mx, rtol=1e-4, atol=1e-2)
torch.testing.assert_close(softmax_sum_index.cpu().double()[0, 0], sm, rtol=1e-3, atol=1e-3)
print("EXAMPLE OK")
