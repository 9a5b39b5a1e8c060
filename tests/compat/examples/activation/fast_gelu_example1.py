# Seed 004, torch_npu.fast_gelu, 示例一, turned from doctest lines into a script: the `>>> `
# prompts were dropped, the two imports the doctest assumes were added and the echoed values
# are printed.
import torch
import torch_npu

x = torch.rand(2).npu()
print(x)
print(torch_npu.fast_gelu(x))

# --- added by npu_anywhere tests: check the numbers ---
# fast_gelu(x) = x / (1 + e^(-1.702 x)) (seed 004, npu_fast_gelu formula 2); the doc shows
# tensor([0.5991, 0.4094]) -> tensor([0.4403, 0.2733]).
out = torch_npu.fast_gelu(x)
x64 = x.to(torch.float64)
assert out.shape == (2,) and out.dtype == torch.float32
torch.testing.assert_close(out.to(torch.float64), x64 / (1 + torch.exp(-1.702 * x64)), rtol=1.3e-6, atol=1e-6)
doc = torch_npu.fast_gelu(torch.tensor([0.5991, 0.4094]).npu())
torch.testing.assert_close(doc, torch.tensor([0.4403, 0.2733]), rtol=0, atol=6e-5)
print("EXAMPLE OK")
