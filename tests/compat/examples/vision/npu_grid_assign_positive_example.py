# Seed 004, torch_npu.npu_grid_assign_positive, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
assigned_gt_inds = torch.rand(4).npu()
overlaps = torch.rand(2,4).npu()
box_responsible_flags = torch.tensor([1, 1, 1, 0], dtype=torch.uint8).npu()
max_overlap = torch.rand(4).npu()
argmax_overlap = torch.tensor([1, 0, 1, 0], dtype=torch.int32).npu()
gt_max_overlaps = torch.rand(2).npu()
gt_argmax_overlaps = torch.tensor([1, 0],dtype=torch.int32).npu()
output = torch_npu.npu_grid_assign_positive(assigned_gt_inds, overlaps, box_responsible_flags, max_overlap, argmax_overlap, gt_max_overlaps, gt_argmax_overlaps, 128, 0.5, 0., True)
print(output.shape)

# --- added by npu_anywhere tests: check the numbers ---
# Positives (max IoU > 0.5 and responsible) take argmax + 1; a ground truth's best boxes
# (IoU equal to its maximum, responsible) take its index + 1; the rest keep their value.
want = assigned_gt_inds.cpu().tolist()
flags = box_responsible_flags.cpu().tolist()
for i in range(4):
    if max_overlap[i].item() > 0.5 and flags[i] == 1:
        want[i] = argmax_overlap[i].item() + 1
for j in range(2):
    if gt_max_overlaps[j].item() > 0.0:
        for i in range(4):
            if overlaps[j, i].item() == gt_max_overlaps[j].item() and flags[i] == 1:
                want[i] = j + 1
assert output.shape == torch.Size([4]) and output.dtype == torch.float32
torch.testing.assert_close(output.cpu(), torch.tensor(want), rtol=0, atol=0)
print("EXAMPLE OK")
