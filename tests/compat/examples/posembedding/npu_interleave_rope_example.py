# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_interleave_rope.md, 调用示例, "单算子
# 模式调用" (npu_interleave_rope is not in seed 004).  Copied from the documentation unchanged
# (the indentation of the fenced block removed).
import torch
import torch_npu

# 生成随机数据
x = torch.randn(32, 32, 1, 64, dtype = torch.float16)
cos = torch.randn(32, 1, 1, 64, dtype = torch.float16)
sin = torch.randn(32, 1, 1, 64, dtype = torch.float16)
x_npu = x.npu()
cos_npu = cos.npu()
sin_npu = sin.npu()

# 调用InterleaveRope算子
q_embed_npu = torch_npu.npu_interleave_rope(x_npu, cos_npu, sin_npu)

# --- added by npu_anywhere tests: check the numbers ---
# The same page's formula, in float64:
#     q = reshape(x, [B, N, S, D/2, 2]).transpose(-1, -2).reshape([B, N, S, D])
#     q_embed = q * cos + RotateHalf(q) * sin,  RotateHalf(q) = cat(-q[D/2:], q[:D/2])
B, N, S, D = x.shape
q = x.to(torch.float64).reshape(B, N, S, D // 2, 2).transpose(-1, -2).reshape(B, N, S, D)
rotate_half_q = torch.cat((-q[..., D // 2:], q[..., :D // 2]), dim=-1)
expected = q * cos.to(torch.float64) + rotate_half_q * sin.to(torch.float64)
assert q_embed_npu.shape == x.shape and q_embed_npu.dtype == torch.float16, (
    q_embed_npu.shape, q_embed_npu.dtype)
assert q_embed_npu.device == x_npu.device, (q_embed_npu.device, x_npu.device)
torch.testing.assert_close(q_embed_npu.cpu().to(torch.float64), expected, rtol=2 ** -10,
                           atol=1e-3)
print("EXAMPLE OK")
