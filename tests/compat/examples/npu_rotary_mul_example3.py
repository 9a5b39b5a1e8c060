# Seed 004, torch_npu.npu_rotary_mul, 示例3 (half, with a rotate matrix), turned from doctest
# lines into a script: the `>>> ` prompts were dropped and the two imports the doctest assumes
# were added.  As documented, rotate is bfloat16 while x, r1 and r2 are float32.
import torch
import torch_npu

n = 128
rotate = torch.zeros(n, n, dtype=torch.bfloat16) # half
half = n // 2
rotate[:half, half:] = torch.eye(half)
rotate[half:, :half] = -torch.eye(half)
x = torch.rand(2, 2, 5, n).npu()
r1 = torch.rand(1, 1, 5, n).npu()
r2 = torch.rand(1, 1, 5, n).npu()
out = torch_npu.npu_rotary_mul(x, r1, r2, "half", rotate)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004, with rotate:  x_new = input @ rotate;  output = r1 * input + r2 * x_new.
# This matrix is the half rotation, so x_new also equals torch.cat((-x2, x1), dim=-1).
x64, r1_64, r2_64 = (t.to(torch.float64) for t in (x, r1, r2))
x_new = x64 @ rotate.to(torch.float64)
x1, x2 = torch.chunk(x64, 2, -1)
assert torch.equal(x_new, torch.cat((-x2, x1), dim=-1))
expected = r1_64 * x64 + r2_64 * x_new
assert out.shape == x.shape and out.dtype == x.dtype == torch.float32, (out.shape, out.dtype)
assert out.device == x.device, (out.device, x.device)
torch.testing.assert_close(out.to(torch.float64), expected, rtol=1e-6, atol=1e-6)
print("EXAMPLE OK")
