# Seed 004, torch_npu.npu_multi_head_attention, 示例.  Copied from the documentation; the
# printed tensor of the doc is random values and is not reproduced.
import torch
import torch_npu
import numpy as np
batch = 8
attn_head_num = 16
attn_dim_per_head = 64
src_len = 64
tgt_len = 64
dropout_prob = 0.0
softmax_use_float = True
weight_col = attn_head_num * attn_dim_per_head
query = torch.from_numpy(np.random.uniform(-1, 1, (batch * tgt_len, weight_col)).astype("float16")).npu()
key = torch.from_numpy(np.random.uniform(-1, 1, (batch * src_len, weight_col)).astype("float16")).npu()
value = torch.from_numpy(np.random.uniform(-1, 1, (batch * tgt_len, weight_col)).astype("float16")).npu()
query_weight = torch.from_numpy(np.random.uniform(-1, 1, (weight_col, weight_col)).astype("float16")).npu()
key_weight = torch.from_numpy(np.random.uniform(-1, 1, (weight_col, weight_col)).astype("float16")).npu()
value_weight = torch.from_numpy(np.random.uniform(-1, 1, (weight_col, weight_col)).astype("float16")).npu()
out_proj_weight = torch.from_numpy(np.random.uniform(-1, 1, (weight_col, weight_col)).astype("float16")).npu()
attn_mask = torch.from_numpy(np.random.uniform(-1, 1, (batch, attn_head_num, tgt_len, src_len)).astype("float16")).npu()
query_bias = torch.from_numpy(np.random.uniform(-1, 1, (weight_col,)).astype("float16")).npu()
key_bias = torch.from_numpy(np.random.uniform(-1, 1, (weight_col,)).astype("float16")).npu()
value_bias = torch.from_numpy(np.random.uniform(-1, 1, (weight_col,)).astype("float16")).npu()
out_proj_bias = torch.from_numpy(np.random.uniform(-1, 1, (weight_col,)).astype("float16")).npu()
dropout_mask = torch.from_numpy(np.random.uniform(-1, 1, (weight_col,)).astype("float16")).npu()
npu_result, npu_dropout_mask, npu_query_res, npu_key_res, npu_value_res, npu_attn_scores, npu_attn_res, npu_context = torch_npu.npu_multi_head_attention (query, key, value, query_weight, key_weight, value_weight, attn_mask, out_proj_weight, query_bias, key_bias, value_bias, out_proj_bias, dropout_mask, attn_head_num, attn_dim_per_head, src_len, tgt_len, dropout_prob, softmax_use_float)
print(npu_result)

# --- added by npu_anywhere tests: check the numbers ---
# The float64 formula: projections x @ W^T + b, q scaled by 64 ** -0.5, softmax(q k^T + mask),
# context (batch * tgt_len, 1024), output projection.  The scores reach hundreds, where a
# float16 ulp (0.25) moves the softmax visibly: like the kernel, the golden rounds q, k and
# the masked scores to float16 (each a float16 op in op-plugin's golden) before the softmax.
def lin(x, w, b):
    return x.cpu().double() @ w.cpu().double().T + b.cpu().double()
def heads(x):
    return x.reshape(batch, -1, attn_head_num, attn_dim_per_head).permute(0, 2, 1, 3)
q = heads(lin(query, query_weight, query_bias) * attn_dim_per_head ** -0.5)
k = heads(lin(key, key_weight, key_bias))
v = heads(lin(value, value_weight, value_bias))
r16 = lambda t: t.to(torch.float16).double()
scores = r16(r16(r16(q) @ r16(k).transpose(-1, -2)) + attn_mask.cpu().double())
p = torch.softmax(scores, -1)
context = (p @ v).permute(0, 2, 1, 3).reshape(batch * tgt_len, weight_col)
expected = lin(context, out_proj_weight, out_proj_bias)
assert npu_result.shape == (512, 1024) and npu_attn_scores.dtype == torch.float32
# The example's inputs are unseeded, and a float16 ulp of a score near a softmax tie moves a
# few outputs by up to ~1% of the largest: judge the largest error loosely and the mean tightly
# (a wrong formula misses both by orders of magnitude).
diff = (npu_result.cpu().double() - expected).abs()
err = diff.max() / expected.abs().max()
mean_err = diff.mean() / expected.abs().mean()
assert err < 2e-2 and mean_err < 1e-3, (err, mean_err)
print("EXAMPLE OK")
