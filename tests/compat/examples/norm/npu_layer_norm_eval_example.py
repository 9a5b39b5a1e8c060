# Seed 004, torch_npu.npu_layer_norm_eval, 示例, turned from doctest lines into a script: the
# `>>> ` prompts and the printed values were dropped, the two imports the doctest assumes added.
# `torch.Tensor(*normalized_shape)` is uninitialized memory, as in the doc.
import torch
import torch_npu

input = torch.rand((6, 4), dtype=torch.float32).npu()
input
normalized_shape = input.size()[1:]
normalized_shape
weight = torch.Tensor(*normalized_shape).npu()
weight
bias = torch.Tensor(*normalized_shape).npu()
bias
output = torch_npu.npu_layer_norm_eval(input, normalized_shape, weight, bias, 1e-5)
output

# --- added by npu_anywhere tests: check the numbers ---
# Same as torch.nn.functional.layer_norm:  (x - E[x]) / sqrt(Var[x] + eps) * weight + bias
x64 = input.to(torch.float64)
mean = x64.mean(-1, keepdim=True)
var = ((x64 - mean) ** 2).mean(-1, keepdim=True)
expected = ((x64 - mean) / torch.sqrt(var + 1e-5)) * weight.to(torch.float64) \
    + bias.to(torch.float64)
assert output.shape == (6, 4) and output.dtype == torch.float32, (output.shape, output.dtype)
# weight/bias hold arbitrary bits: compare in float32 range, NaN where the formula gives NaN.
torch.testing.assert_close(output, expected.to(torch.float32), rtol=1e-4, atol=1e-5,
                           equal_nan=True)
print("EXAMPLE OK")
