# Seed 004, torch_npu.npu_geglu, 示例.  Copied from the documentation with one change: the
# documented input is [24, 9216, 2560] float16 (566 million elements, over 1 GB, and several GB
# of float32 temporaries on a CPU); it is [24, 16, 2560] here.  The printed tensors of the doc
# are random values and are not reproduced.
import numpy as np
import torch
import torch_npu

data_x = np.random.uniform(-2, 2, [24,16,2560]).astype(np.float16)
x_npu = torch.from_numpy(data_x).npu()
y_npu, y_gelu_npu = torch_npu.npu_geglu(x_npu, dim=-1, approximate=1)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnGeGluV3 (activate_left=False, the default): out = A * Gelu(B), outGelu = Gelu(B), with
# A, B the left and right halves along dim; approximate=1 is the tanh form
#     Gelu(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
# The float16 kernel rounds Gelu to float16 before multiplying by A.
import math
x64 = torch.from_numpy(data_x).to(torch.float64)
A, B = x64[..., :1280], x64[..., 1280:]
gelu = 0.5 * B * (1 + torch.tanh(math.sqrt(2 / math.pi) * (B + 0.044715 * B ** 3)))
for t in (y_npu, y_gelu_npu):
    assert t.shape == (24, 16, 1280) and t.dtype == torch.float16, (t.shape, t.dtype)
torch.testing.assert_close(y_gelu_npu.to(torch.float64), gelu, rtol=1e-3, atol=1e-5)
expected = A * gelu.to(torch.float16).to(torch.float64)
torch.testing.assert_close(y_npu.to(torch.float64), expected, rtol=1e-3, atol=1e-5)
print("EXAMPLE OK")
