# Seed 004, torch_npu.npu_ifmr, 示例.  Copied from the documentation (the ">>>" prompts and the
# printed tensors removed; the printed input restored as the literal it shows).
import torch
import torch_npu
torch.npu.set_compile_mode(jit_compile=True)
input = torch.tensor([[[[0.4508, 0.6513, 0.4734, 0.1924],
[0.0402, 0.5502, 0.0694, 0.9032],
[0.4844, 0.5361, 0.9369, 0.7874]],
[[0.5157, 0.1863, 0.4574, 0.8033],
[0.5986, 0.8090, 0.7605, 0.8252],
[0.4264, 0.8952, 0.2279, 0.9746]]],
[[[0.0803, 0.7114, 0.8773, 0.2341],
[0.6497, 0.0423, 0.8407, 0.9515],
[0.1821, 0.5931, 0.7160, 0.4968]],
[[0.7977, 0.0899, 0.9572, 0.0146],
[0.2804, 0.8569, 0.2292, 0.1118],
[0.5747, 0.4064, 0.8370, 0.1611]]]], dtype=torch.float32).npu()
min_value = torch.min(input)
max_value = torch.max(input)
hist = torch.histc(input.to('cpu'), bins=128, min=min_value.to('cpu'), max=max_value.to('cpu'))
cdf = torch.cumsum(hist,dim=0).int().npu()
scale, offset = torch_npu.npu_ifmr(input, min_value, max_value, cdf, min_percentile=0.999999, max_percentile=0.999999, search_start=0.7, search_end=1.3, search_step=0.01, with_offset=False)
scale
offset

# --- added by npu_anywhere tests: check the numbers ---
# The doc prints scale 0.0080 and offset 0.  Independently: without offset the candidates are
# max(|max_init|, |min_init|) * s / 127 for s in arange(0.7, 1.3, 0.01); the chosen one has the
# smallest sum((clip(round(x / scale), -128, 127) * scale - x) ** 2) (float64 here).
assert round(scale.item(), 4) == 0.0080 and offset.item() == 0.0, (scale, offset)
x64 = input.to(torch.float64).reshape(-1)
def loss(s):
    return float(((torch.round(x64 / s).clamp(-128, 127) * s - x64) ** 2).sum())
cdf64 = cdf.to(torch.float64) / input.numel()
idx = int((cdf64 < 0.999999).sum())
max_init = idx / 128 * (max_value.item() - min_value.item()) + min_value.item()
min_init = int((cdf64 < 1 - 0.999999).sum()) / 128 * (max_value.item() - min_value.item()) + min_value.item()
m = max(abs(max_init), abs(min_init))
best = min(loss(m * (0.7 + 0.01 * i) / 127) for i in range(61))
assert loss(scale.item()) <= best * (1 + 1e-4), (loss(scale.item()), best)
print("EXAMPLE OK")
