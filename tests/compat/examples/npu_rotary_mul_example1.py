# Seed 004, torch_npu.npu_rotary_mul, 示例1 (half mode), turned from doctest lines into a script:
# the `>>> ` prompts were dropped and the two imports the doctest assumes were added.
import torch
import torch_npu

x = torch.rand(2, 2, 5, 128).npu()
r1 = torch.rand(1, 2, 1, 128).npu()
r2 = torch.rand(1, 2, 1, 128).npu()
out = torch_npu.npu_rotary_mul(x, r1, r2)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004, half mode:  x1, x2 = torch.chunk(input, 2, -1);  x_new = torch.cat((-x2, x1), dim=-1)
#                       output = r1 * input + r2 * x_new
x64, r1_64, r2_64 = (t.to(torch.float64) for t in (x, r1, r2))
x1, x2 = torch.chunk(x64, 2, -1)
x_new = torch.cat((-x2, x1), dim=-1)
expected = r1_64 * x64 + r2_64 * x_new
assert out.shape == x.shape and out.dtype == x.dtype == torch.float32, (out.shape, out.dtype)
assert out.device == x.device, (out.device, x.device)
torch.testing.assert_close(out.to(torch.float64), expected, rtol=1e-6, atol=1e-6)
print("EXAMPLE OK")
