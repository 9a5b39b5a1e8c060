# Seed 004, torch_npu.npu_dropout_with_add_softmax, 示例.  Copied from the documentation; the
# printed tensors of the doc are random values and are not reproduced.
import torch
import torch_npu

self = torch.rand(16, 16, 128, 128).npu()
x1 = torch.rand(16, 16, 128, 128).npu()
_, _, out = torch_npu.npu_dropout_with_add_softmax(self, x1, 2, 0.9, -1)

# --- added by npu_anywhere tests: check the numbers ---
# y = x1 + self * alpha; softmax over the last dim; prob = 0.9 is the drop rate, so about 10 %
# of the elements survive, each multiplied by 1 / (1 - 0.9).
y = x1.cpu().double() + self.cpu().double() * 2
soft = torch.exp(y - y.max(-1, keepdim=True).values)
soft = soft / soft.sum(-1, keepdim=True)
out64 = out.cpu().double()
kept = out64 != 0
assert out.shape == (16, 16, 128, 128) and out.dtype == torch.float32
assert abs(kept.double().mean().item() - 0.1) < 0.01, kept.double().mean()
torch.testing.assert_close(out64[kept], (soft / (1 - 0.9))[kept], rtol=1e-5, atol=1e-7)
print("EXAMPLE OK")
