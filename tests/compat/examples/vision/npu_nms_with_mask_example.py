# Seed 004, torch_npu.npu_nms_with_mask, 示例.  Copied unchanged (the doctest prompts removed).
import torch
import torch_npu
input = torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.6, 0.5, 0.4, 0.3], [6.0, 7.0, 8.0, 9.0, 0.4, 0.5, 0.6, 0.7]], dtype=torch.float16).to("npu")
iou_threshold = 0.5
output1, output2, output3, = torch_npu.npu_nms_with_mask(input, iou_threshold)
output1
output2
output3

# --- added by npu_anywhere tests: check the numbers ---
# The doc's printed outputs.
expected = torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.6001], [6.0, 7.0, 8.0, 9.0, 0.3999]],
                        dtype=torch.float16)
torch.testing.assert_close(output1.cpu(), expected, rtol=0, atol=1e-3)
assert output2.cpu().tolist() == [0, 1] and output2.dtype == torch.int32
assert output3.cpu().tolist() == [1, 1] and output3.dtype == torch.uint8
print("EXAMPLE OK")
