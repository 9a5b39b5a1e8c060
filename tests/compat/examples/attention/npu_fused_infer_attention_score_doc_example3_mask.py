# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例3：MHA + Causal Mask（带atten_mask） (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 8, 164, 128
KV_N, KV_S = 8, 164

q = torch.randn(B, Q_N, Q_S, D, dtype=torch.float16).npu()
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()

#下三角causal mask: (1, Q_S, KV_S)
mask = torch.tril(torch.ones(Q_S, KV_S, dtype=torch.bool)).unsqueeze(0).npu()

scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    atten_mask=mask,
    num_heads=Q_N,
    input_layout="BNSD",
    scale=scale,
    sparse_mode=0,     # defaultMask:使用完整mask矩阵
    pre_tokens=65535,
    next_tokens=65535
)

print(out.shape)  # torch.Size([1, 8, 164, 128])

# --- added by npu_anywhere tests: check the numbers ---
# True (1) = masked on the NPU, so this tril mask hides the diagonal and everything below it:
# row i sees keys j > i only, and the last row sees nothing.  With inner_precise 0 (the
# default: no row-invalid correction) the kernel scores masked keys with the float32 lowest
# value instead of dropping them, so that last row is a flat softmax: the mean of all values.
visible = ~torch.tril(torch.ones(Q_S, KV_S, dtype=torch.bool))
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
s = s.masked_fill(~visible, float("-inf"))
s[:, :, -1] = 0.0                                # the fully masked row: equal scores
p = torch.softmax(s, -1)
expected = p @ v.double()
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
torch.testing.assert_close(out[0, :, -1].double(), v[0].double().mean(1), rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
