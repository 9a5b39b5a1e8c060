# op-plugin docs/zh/custom_APIs/torch_npu/（beta）torch_npu-npu_ptiou.md, 调用示例 (seed 004's
# npu_ptiou example calls npu_iou instead).  Copied unchanged.
import torch
import torch_npu
bboxes = torch.tensor([[0, 0, 10, 10],
                       [10, 10, 20, 20],
                       [32, 32, 38, 42]], dtype=torch.float16).to("npu")
gtboxes = torch.tensor([[0, 0, 10, 20],
                        [0, 10, 10, 10],
                        [10, 10, 20, 20]], dtype=torch.float16).to("npu")
output_iou = torch_npu.npu_ptiou(bboxes, gtboxes, 0)
print(output_iou)

# --- added by npu_anywhere tests: check the numbers ---
expect = torch.tensor([[0.4985, 0.0000, 0.0000],
                       [0.0000, 0.0000, 0.0000],
                       [0.0000, 0.9961, 0.0000]], dtype=torch.float16)
assert torch.equal(output_iou.cpu(), expect), output_iou
print("EXAMPLE OK")
