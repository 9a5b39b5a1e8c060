# Seed 004, torch_npu.npu_min, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.randn(2, 2, 2, 2, dtype = torch.float32).npu()
input
outputs, indices = torch_npu.npu_min(input, 2)
outputs
indices

# --- added by npu_anywhere tests: check the numbers ---
# values = min over dim 2, indices = where (int32); the doc's printed tensor as a fixed case.
x64 = input.cpu().to(torch.float64)
for a in range(2):
    for b in range(2):
        for d in range(2):
            line = [float(x64[a, b, k, d]) for k in range(2)]
            k = min(range(2), key=lambda k: (line[k], k))
            assert float(outputs[a, b, d]) == line[k] and int(indices[a, b, d]) == k
assert outputs.shape == (2, 2, 2) and indices.dtype == torch.int32
doc = torch.tensor([[[[-0.9909, -0.2369], [-0.9569, -0.6223]], [[0.1157, -0.3147], [-0.7761, 0.1344]]],
                    [[[1.6292, 0.5953], [0.6940, -0.6367]], [[-1.2335, 0.2131], [1.0748, -0.7046]]]])
v, i = torch_npu.npu_min(doc.npu(), 2)
assert torch.equal(v.cpu(), torch.tensor([[[-0.9909, -0.6223], [-0.7761, -0.3147]],
                                          [[0.6940, -0.6367], [-1.2335, -0.7046]]]))
assert i.cpu().tolist() == [[[0, 1], [1, 0]], [[1, 1], [0, 1]]]
print("EXAMPLE OK")
