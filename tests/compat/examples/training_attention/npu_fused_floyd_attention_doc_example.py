# seed 004, torch_npu.npu_fused_floyd_attention, 调用示例 (indentation restored).
import torch
import torch_npu
import math
def truncated_normal(mean, std, min, max, size):
    x = torch.normal(mean, std, size)
    x = torch.where((x < min) | (x > max), torch.tensor(0.0), x)
    return x
B, N, S1, S2, S3, D = 1, 1, 16, 256, 256, 64
Q = truncated_normal(0.0, 1, -10, 10, (B, N, S1, S2, D)).to(torch.bfloat16).npu()
K1 = truncated_normal(0.0, 1, -10, 10, (B, N, S1, S3, D)).to(torch.bfloat16).npu()
K2 = truncated_normal(0.0, 1, -10, 10, (B, N, S3, S2, D)).to(torch.bfloat16).npu()
V1 = truncated_normal(0.0, 1, -10, 10, (B, N, S1, S3, D)).to(torch.bfloat16).npu()
V2 = truncated_normal(0.0, 1, -10, 10, (B, N, S3, S2, D)).to(torch.bfloat16).npu()
atten_mask = torch.randint(0, 2, [B, 1, S1, 1, S3]).to(torch.bool).npu()
scale = 1.0/math.sqrt(D)
x_max_npu, x_sum_npu, output_npu = torch_npu.npu_fused_floyd_attention(
    Q,
    K1,
    V1,
    K2,
    V2,
    atten_mask = atten_mask,
    scale_value = scale
)

# --- added by npu_anywhere tests: check the numbers ---
# the seed formula in float64: softmax over the pivot axis (S3) of both score paths
s = scale * (torch.einsum("bhmnd,bhmkd->bhmnk", Q.double(), K1.double())
             + torch.einsum("bhmnd,bhknd->bhmnk", Q.double(), K2.double()))
s = s.masked_fill(atten_mask.cpu(), float("-inf"))
p = torch.softmax(s, -1)
expected = (torch.einsum("bhmnk,bhmkd->bhmnd", p, V1.double())
            + torch.einsum("bhmnk,bhknd->bhmnd", p, V2.double()))
full = atten_mask.cpu().all(-1).squeeze(-1)          # rows masked everywhere: skip them
keep = ~full.unsqueeze(-1).expand(B, N, S1, S2)
assert output_npu.shape == Q.shape and x_max_npu.shape == (B, N, S1, S2, 8)
torch.testing.assert_close(output_npu.double()[keep], expected[keep], rtol=3e-2, atol=3e-2)
torch.testing.assert_close(x_max_npu[..., 0].double()[keep], s.amax(-1)[keep],
                           rtol=1e-4, atol=1e-3)
print("EXAMPLE OK")
