# Seed 004, torch_npu.npu_nms_v4, 示例.  Copied unchanged (the doctest prompts removed).
import torch
import torch_npu
boxes=torch.randn(100,4).npu()
scores=torch.randn(100).npu()
boxes.uniform_(0,100)
scores.uniform_(0,1)
max_output_size = 20
iou_threshold = torch.tensor(0.5).npu()
scores_threshold = torch.tensor(0.3).npu()
npu_output = torch_npu.npu_nms_v4(boxes, scores, max_output_size, iou_threshold, scores_threshold)
npu_output

# --- added by npu_anywhere tests: check the numbers ---
# TF NonMaxSuppressionV4: boxes scoring > 0.3 by descending score, kept unless IoU > 0.5 with a
# kept one, at most 20; the output is [20] int32 (kept first, then 0) and a 0-D count.
b, s = boxes.cpu().double().tolist(), scores.cpu().double().tolist()


def iou(p, q):
    p = [min(p[0], p[2]), min(p[1], p[3]), max(p[0], p[2]), max(p[1], p[3])]
    q = [min(q[0], q[2]), min(q[1], q[3]), max(q[0], q[2]), max(q[1], q[3])]
    inter = max(0, min(p[2], q[2]) - max(p[0], q[0])) * max(0, min(p[3], q[3]) - max(p[1], q[1]))
    return inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter)


kept = []
for i in sorted((i for i in range(100) if s[i] > 0.3), key=lambda i: (-s[i], i)):
    if all(iou(b[i], b[k]) <= 0.5 for k in kept):
        kept.append(i)
    if len(kept) == 20:
        break
selected, valid = npu_output
assert selected.shape == (20,) and selected.dtype == torch.int32 and valid.dim() == 0
assert valid.item() == len(kept) and selected.cpu().tolist() == kept + [0] * (20 - len(kept))
print("EXAMPLE OK")
