# Seed 004, torch_npu.npu_giou, 示例.  Copied unchanged but for `import numpy as np`, which the
# seed uses without importing (op-plugin's newer doc has it).
import numpy as np
import torch
import torch_npu
a=np.random.uniform(0,1,(4,10)).astype(np.float16)
b=np.random.uniform(0,1,(4,10)).astype(np.float16)
box1=torch.from_numpy(a).to("npu")
box2=torch.from_numpy(a).to("npu")
output = torch_npu.npu_giou(box1, box2, trans=True, is_cross=False, mode=0)
output

# --- added by npu_anywhere tests: check the numbers ---
# Both arguments are the same boxes, so GIoU = 1 everywhere, in the (n, 1) layout the doc prints.
assert output.shape == (10, 1) and output.dtype == torch.float16
assert torch.equal(output.cpu(), torch.ones(10, 1, dtype=torch.float16)), output
print("EXAMPLE OK")
