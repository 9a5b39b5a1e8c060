# Seed 004, torch_npu.npu_rotary_mul, 示例2 (interleave, with a rotate matrix), turned from
# doctest lines into a script: the `>>> ` / `... ` prompts were dropped, the loop body indented,
# and the two imports the doctest assumes were added.  As documented, rotate is bfloat16 while
# x, r1 and r2 are float32 (torch.rand's default dtype).
import torch
import torch_npu

n = 128
rotate = torch.zeros(n, n, dtype=torch.bfloat16) # interleave
for i in range(0, n, 2):
    rotate[i + 0, i + 1] = 1
    rotate[i + 1, i + 0] = 1
x = torch.rand(2, 2, 5, n).npu()
r1 = torch.rand(1, 1, 5, n).npu()
r2 = torch.rand(1, 1, 5, n).npu()
out = torch_npu.npu_rotary_mul(x, r1, r2, "interleave", rotate)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004, with rotate:  x_new = input @ rotate;  output = r1 * input + r2 * x_new
# (this matrix, as documented, swaps adjacent elements without the minus sign of the
# interleave formula, so x_new[2i] = x[2i+1] and x_new[2i+1] = x[2i]).
x64, r1_64, r2_64 = (t.to(torch.float64) for t in (x, r1, r2))
x_new = x64 @ rotate.to(torch.float64)
assert torch.equal(x_new[..., 0::2], x64[..., 1::2]) and torch.equal(x_new[..., 1::2], x64[..., 0::2])
expected = r1_64 * x64 + r2_64 * x_new
assert out.shape == x.shape and out.dtype == x.dtype == torch.float32, (out.shape, out.dtype)
assert out.device == x.device, (out.device, x.device)
torch.testing.assert_close(out.to(torch.float64), expected, rtol=1e-6, atol=1e-6)
print("EXAMPLE OK")
