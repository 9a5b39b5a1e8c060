# Seed 004, torch_npu.npu_bounding_box_decode, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
rois = torch.tensor([[1., 2., 3., 4.], [3.,4., 5., 6.]], dtype = torch.float32).to("npu")
deltas = torch.tensor([[5., 6., 7., 8.], [7.,8., 9., 6.]], dtype = torch.float32).to("npu")
output = torch_npu.npu_bounding_box_decode(rois, deltas, 0, 0, 0, 0, 1, 1, 1, 1, (10, 10), 0.1)
print(output)

# --- added by npu_anywhere tests: check the numbers ---
# dw, dh clip at |log 0.1|; box (gx -+ gw/2 +- 0.5) clamped to [0, 9]; float64 by hand:
# row 0: gx = 2 + 3 * 5 = 17, gw = 3 * 10 = 30 -> x1 = 17 - 15 + 0.5 = 2.5; y1 = 21 - 15 + 0.5.
want = torch.tensor([[2.5, 6.5, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
torch.testing.assert_close(output.cpu(), want, rtol=0, atol=1e-3)
print("EXAMPLE OK")
