# Seed 004, torch_npu.npu_iou, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
bboxes = torch.tensor([[0, 0, 10, 10],[10, 10, 20, 20],[32, 32, 38, 42]], dtype=torch.float16).to("npu")
gtboxes = torch.tensor([[0, 0, 10, 20],[0, 10, 10, 10],[10, 10, 20, 20]], dtype=torch.float16).to("npu")
output_iou = torch_npu.npu_iou(bboxes, gtboxes, 0)
output_iou

# --- added by npu_anywhere tests: check the numbers ---
# The doc's printed result, exactly (float16).
expect = torch.tensor([[0.4985, 0.0000, 0.0000],
                       [0.0000, 0.0000, 0.0000],
                       [0.0000, 0.9961, 0.0000]], dtype=torch.float16)
assert torch.equal(output_iou.cpu(), expect), output_iou
print("EXAMPLE OK")
