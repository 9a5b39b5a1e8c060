# Seed 004, torch_npu.npu_nms_rotated, 示例.  Copied unchanged (the doctest prompts removed).
import torch
import torch_npu
dets=torch.randn(100,5).npu()
scores=torch.randn(100).npu()
dets.uniform_(0,100)
scores.uniform_(0,1)
output1, output2 = torch_npu.npu_nms_rotated(dets, scores, 0.2, 0, -1, 1)
output1
output2

# --- added by npu_anywhere tests: check the numbers ---
# Selection order is by descending score: the best box comes first, every kept index is a
# distinct box, the kept scores descend, and output2 is the one-element count.
kept = output1.cpu().tolist()
s = scores.cpu()
assert output1.dtype == output2.dtype == torch.int32 and output2.cpu().tolist() == [len(kept)]
assert kept[0] == int(s.argmax()) and len(set(kept)) == len(kept)
assert all(s[a] >= s[b] for a, b in zip(kept, kept[1:]))
print("EXAMPLE OK")
