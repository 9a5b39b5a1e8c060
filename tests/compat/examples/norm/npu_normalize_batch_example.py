# Seed 004, torch_npu.npu_normalize_batch, 示例, turned from doctest lines into a script: the
# `>>> ` prompts and the printed values were dropped, and the imports the doctest assumes
# (torch, numpy as np, torch_npu) were added.
import numpy as np
import torch
import torch_npu

a=np.random.uniform(1,10,(2,3,6)).astype(np.float32)
b=np.random.uniform(3,6,(2)).astype(np.int32)
x=torch.from_numpy(a).to("npu")
seqlen=torch.from_numpy(b).to("npu")
out = torch_npu.npu_normalize_batch(x, seqlen, 0)
out

# --- added by npu_anywhere tests: check the numbers ---
# per_feature (0): mean/std (unbiased) over the first seq_len[i] frames of each feature;
# out[i] = (x[i] - mean) / (std + 1e-5) for every frame (op-plugin's CPU golden)
x64 = x.to(torch.float64)
expected = torch.empty_like(x64)
for i in range(x64.shape[0]):
    frames = x64[i, :, :int(seqlen[i])]
    expected[i] = (x64[i] - frames.mean(1, keepdim=True)) / (frames.std(1, keepdim=True) + 1e-5)
assert out.shape == (2, 3, 6) and out.dtype == torch.float32, (out.shape, out.dtype)
torch.testing.assert_close(out.to(torch.float64), expected, rtol=1e-4, atol=1e-4)
print("EXAMPLE OK")
