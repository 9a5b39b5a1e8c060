# Seed 004, torch_npu.npu_ps_roi_pooling, 示例.  Copied unchanged (the doctest prompts removed).
import torch
import torch_npu
roi = torch.tensor([[[1], [2], [3], [4], [5]],[[6], [7], [8], [9], [10]]], dtype = torch.float16).npu()
x = torch.tensor([[[[ 1]], [[ 2]], [[ 3]], [[ 4]],[[ 5]], [[ 6]], [[ 7]], [[ 8]]],[[[ 9]], [[10]], [[11]], [[12]],[[13]], [[14]], [[15]], [[16]]]], dtype = torch.float16).npu()
out = torch_npu.npu_ps_roi_pooling(x, roi, 0.5, 2, 2)
out

# --- added by npu_anywhere tests: check the numbers ---
# Both rois start past the 1x1 feature map (x1 * 0.5 >= 1), so every bin is empty: zeros of
# shape [batch * rois_num, output_dim, group_size, group_size] (the doc's printed output).
assert out.shape == (2, 2, 2, 2) and out.dtype == torch.float16 and not out.cpu().any()
print("EXAMPLE OK")
