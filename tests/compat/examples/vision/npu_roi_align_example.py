# Seed 004, torch_npu.npu_roi_align, 示例.  Copied unchanged (the doctest prompts removed).
import torch
import torch_npu
x = torch.FloatTensor([[[[1, 2, 3 , 4, 5, 6],
[7, 8, 9, 10, 11, 12],
[13, 14, 15, 16, 17, 18],
[19, 20, 21, 22, 23, 24],
[25, 26, 27, 28, 29, 30],
[31, 32, 33, 34, 35, 36]]]]).npu()
rois = torch.tensor([[0, -2.0, -2.0, 22.0, 22.0]]).npu()
out = torch_npu.npu_roi_align(x, rois, 0.25, 3, 3, 2, 0)
out

# --- added by npu_anywhere tests: check the numbers ---
# The roi scaled by 0.25 spans [-0.5, 5.5]; bins of 2 pixels sampled at their quarter points
# land on whole pixels, so each output is the mean of a 2x2 block (the doc's printed values).
blocks = x.cpu().double().reshape(3, 2, 3, 2).mean((1, 3))
torch.testing.assert_close(out.cpu().double()[0, 0], blocks)
torch.testing.assert_close(out.cpu()[0, 0], torch.tensor([[4.5, 6.5, 8.5], [16.5, 18.5, 20.5],
                                                          [28.5, 30.5, 32.5]]))
print("EXAMPLE OK")
