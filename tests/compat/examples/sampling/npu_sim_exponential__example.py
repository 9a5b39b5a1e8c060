# Seed 004, torch_npu.npu_sim_exponential_, 调用示例.  Copied unchanged.
import torch
import torch_npu
shape = [100, 400]
gen = torch.Generator(device="npu")
gen.manual_seed(0)
input = torch.zeros(shape, dtype=torch.float32).npu()
torch_npu.npu_sim_exponential_(input, lambd=1, generator=gen)

# --- added by npu_anywhere tests: check the numbers ---
# f = -ln(1 - u) / lambd, u ~ U(0, 1]: every value > 0, and the 40000 values follow the
# exponential CDF 1 - exp(-x) (Kolmogorov-Smirnov statistic below the 1% critical value,
# computed in float64).  The seeded generator repeats them.
x = input.cpu().double().flatten().sort().values
n = x.numel()
assert n == 40000 and bool((x > 0).all())
cdf = 1.0 - torch.exp(-x)
d = max(float((torch.arange(1, n + 1, dtype=torch.float64) / n - cdf).max()),
        float((cdf - torch.arange(0, n, dtype=torch.float64) / n).max()))
assert d < 1.63 / n ** 0.5, d
assert abs(float(x.mean()) - 1.0) < 0.03
again = torch.zeros(shape, dtype=torch.float32).npu()
gen.manual_seed(0)
torch_npu.npu_sim_exponential_(again, lambd=1, generator=gen)
assert torch.equal(again, input)
print("EXAMPLE OK")
