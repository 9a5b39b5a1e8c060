# Seed 004, torch_npu.npu_bounding_box_encode, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
anchor_box = torch.tensor([[1., 2., 3., 4.], [3.,4., 5., 6.]], dtype = torch.float32).to("npu")
ground_truth_box = torch.tensor([[5., 6., 7., 8.], [7.,8., 9., 6.]], dtype = torch.float32).to("npu")
output = torch_npu.npu_bounding_box_encode(anchor_box, ground_truth_box, 0, 0, 0, 0, 0.1, 0.1, 0.2, 0.2)
print(output)

# --- added by npu_anywhere tests: check the numbers ---
# The doc prints [[13.3281, 13.3281, 0, 0], [13.3281, 6.6641, 0, -5.4922]] (an Atlas training
# chip; A2 kernels give NaN for the log of the negative height ratio -1/3).  The float64 formula
# gives 40/3 = 13.3333: the kernel's float16 steps round it to 13.3281.
import math
want = torch.tensor([[13.3281, 13.3281, 0.0, 0.0], [13.3281, 6.6641, 0.0, math.nan]])
torch.testing.assert_close(output.cpu(), want, rtol=0, atol=1e-4, equal_nan=True)
assert abs(output[0, 0].item() - 40 / 3) < 1e-2
print("EXAMPLE OK")
