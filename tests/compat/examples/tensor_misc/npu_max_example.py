# Seed 004, torch_npu.npu_max, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.randn(2, 2, 2, 2, dtype = torch.float32).npu()
input
outputs, indices = torch_npu.npu_max(input, 2)
outputs
indices

# --- added by npu_anywhere tests: check the numbers ---
# values = max over dim 2, indices = where (int32); the doc's printed tensor as a fixed case.
x64 = input.cpu().to(torch.float64)
for a in range(2):
    for b in range(2):
        for d in range(2):
            line = [float(x64[a, b, k, d]) for k in range(2)]
            k = max(range(2), key=lambda k: (line[k], -k))
            assert float(outputs[a, b, d]) == line[k] and int(indices[a, b, d]) == k
assert outputs.shape == (2, 2, 2) and indices.dtype == torch.int32
doc = torch.tensor([[[[-1.8135, 0.2078], [-0.6678, 0.7846]], [[0.6458, -0.0923], [-0.2124, -1.9112]]],
                    [[[-0.5800, -0.4979], [0.2580, 1.1335]], [[0.6669, 0.1876], [0.1160, -0.1061]]]])
v, i = torch_npu.npu_max(doc.npu(), 2)
assert torch.equal(v.cpu(), torch.tensor([[[-0.6678, 0.7846], [0.6458, -0.0923]],
                                          [[0.2580, 1.1335], [0.6669, 0.1876]]]))
assert i.cpu().tolist() == [[[1, 1], [0, 0]], [[1, 1], [0, 0]]]
print("EXAMPLE OK")
