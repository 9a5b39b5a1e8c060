# Seed 004, torch_npu.npu_top_k_top_p, 调用示例.  Copied unchanged.
import torch
import torch_npu
logits = torch.randn(16, 2048).npu()
p = torch.rand(16).npu()
k = torch.randint(10, 1024, (16,)).npu().to(torch.int32)
out = torch_npu.npu_top_k_top_p(logits, p, k)

# --- added by npu_anywhere tests: check the numbers ---
# Per row, in float64: ascending (value, index) order; values below the k-th largest are
# removed; the running softmax sum from the smallest entry removes entries while it stays
# <= 1 - p (never the largest entry); kept entries are the input values.  Entries whose
# float64 running sum lies within 1e-5 of 1 - p may round either way in float32: not compared.
import math
x64 = logits.cpu().double()
got = out.cpu().double()
assert out.dtype == logits.dtype and out.shape == logits.shape
unclear = 0
for b in range(16):
    row = x64[b].tolist()
    order = sorted(range(2048), key=lambda i: (row[i], i))
    kk = int(k[b])
    thr = row[order[2048 - kk]]
    alive = [i for i in order if row[i] >= thr]
    m = row[alive[-1]]
    e = [math.exp(row[i] - m) for i in alive]
    s = sum(e)
    limit = 1.0 - float(p[b])
    keep = set()
    run = 0.0
    for j, i in enumerate(alive):
        run += e[j] / s
        near = abs(run - limit) < 1e-5 and j != len(alive) - 1
        unclear += near
        if j == len(alive) - 1 or run > limit or (near and got[b, i] != float("-inf")):
            keep.add(i)
    for i in range(2048):
        want = row[i] if i in keep else float("-inf")
        assert got[b, i] == want, (b, i, got[b, i], want)
assert unclear <= 2, unclear
print("EXAMPLE OK")
