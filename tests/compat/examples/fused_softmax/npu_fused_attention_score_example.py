# Seed 004, torch_npu.npu_fused_attention_score, 示例.  Copied from the documentation with one
# change: the documented batch of 24 with a [24, 16, 512, 512] mask (100 million float16
# elements) is a batch of 2 with sequence length 128 here.  The printed tensor of the doc is
# random values and is not reproduced.
import torch
import torch_npu

query_layer = torch_npu.npu_format_cast(torch.rand(2, 16, 128, 64).npu(), 29).half()
key_layer = torch_npu.npu_format_cast(torch.rand(2, 16, 128, 64).npu(), 29).half()
value_layer = torch_npu.npu_format_cast(torch.rand(2, 16, 128, 64).npu(), 29).half()
attention_mask = torch_npu.npu_format_cast(torch.rand(2, 16, 128, 128).npu(), 29).half()
scale = 0.125
keep_prob = 0.5
context_layer = torch_npu.npu_fused_attention_score(query_layer, key_layer, value_layer, attention_mask, scale, keep_prob)
print(context_layer)

# --- added by npu_anywhere tests: check the numbers ---
# Without dropout (keep_prob = 1) the output is softmax(q k^T * scale + mask) v, permuted to
# (B, S, N, D) and flattened to (B * S, N * D); with keep_prob = 0.5 its mean stays close.
q, k, v, m = (t.cpu().double() for t in (query_layer, key_layer, value_layer, attention_mask))
z = q @ k.transpose(-1, -2) * scale + m
p = torch.exp(z - z.max(-1, keepdim=True).values)
p = p / p.sum(-1, keepdim=True)
expected = (p @ v).permute(0, 2, 1, 3).reshape(2 * 128, 16 * 64)
assert context_layer.shape == (256, 1024) and context_layer.dtype == torch.float16
no_drop = torch_npu.npu_fused_attention_score(query_layer, key_layer, value_layer, attention_mask, scale, 1.0)
torch.testing.assert_close(no_drop.cpu().double(), expected, rtol=2e-3, atol=2e-3)
assert abs(context_layer.cpu().double().mean() - expected.mean()) < 0.02
print("EXAMPLE OK")
