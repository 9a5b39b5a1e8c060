# Seed 004, torch_npu.npu_reshape, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a=torch.rand(2,8).npu()
out=torch_npu.npu_reshape(a,(4,4))
out

# --- added by npu_anywhere tests: check the numbers ---
# the same values in row-major order: out[r, c] = a.flat[4 r + c].
flat = [float(v) for v in a.cpu().reshape(-1)]
assert out.shape == (4, 4)
assert [[float(v) for v in row] for row in out.cpu()] == [flat[4 * r:4 * r + 4] for r in range(4)]
print("EXAMPLE OK")
