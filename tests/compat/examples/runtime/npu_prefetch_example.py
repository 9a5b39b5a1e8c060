# Seed 004, torch_npu.npu_prefetch, 单算子多流并发调用, re-indented; the sizes are 100 where the
# seed has 10000 (a 10000^3 matmul takes minutes on a CPU) and max_size scaled alike.
import torch
import torch_npu
s_cmo = torch.npu.Stream()
x = torch.randn(100, 100, dtype=torch.float32).npu()
y = torch.randn(100, 1, dtype=torch.float32).npu()
add = torch.add(x, 1)
with torch.npu.stream(s_cmo):
    torch_npu.npu_prefetch(y, None, 100000)
abs = torch.abs(add)
mul = torch.matmul(abs, abs)
out = torch.matmul(mul, y)

# --- added by npu_anywhere tests: check the numbers ---
# The prefetch changes no value: out is the plain formula in float64.
a = (x.double() + 1).abs()
want = (a @ a) @ y.double()
assert torch.allclose(out.double(), want, rtol=1e-4, atol=1e-3)
print("EXAMPLE OK")
