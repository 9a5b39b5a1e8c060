# Seed 004, torch_npu.npu_scatter, 示例: the doctest turned into a script (the `>>> ` prompts
# dropped, the two imports the doctest assumes added; the echo lines became prints).
import torch
import torch_npu

input = torch.tensor([[1.6279, 0.1226], [0.9041, 1.0980]]).npu()
print(input)
indices = torch.tensor([0, 1],dtype=torch.int32).npu()
print(indices)
updates = torch.tensor([-1.1993, -1.5247]).npu()
print(updates)
dim = 0
output = torch_npu.npu_scatter(input, indices, updates, dim)
print(output)

# --- added by npu_anywhere tests: check the numbers ---
# The doc's output, and the ArgMaxGrad rule behind it: out[indices[j]][j] = updates[j] (dim 0).
expected = input.to(torch.float64).clone()
for j in range(indices.shape[0]):
    expected[int(indices[j]), j] = updates[j].to(torch.float64)
assert torch.equal(output.to(torch.float64), expected), output
doc_output = torch.tensor([[-1.1993, 0.1226], [0.9041, -1.5247]])
assert torch.equal(output, doc_output), output
print("EXAMPLE OK")
