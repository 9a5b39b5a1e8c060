# Seed 004, torch_npu.npu_top_k_top_p_sample, 调用示例.  Re-indented (the seed lost the
# indentation of the if/else block); otherwise copied unchanged.
import numpy as np
import torch
import torch_npu
logits = torch.from_numpy(np.random.uniform(-2, 2, size=[2, 4])).type(torch.float16).npu()
top_ks = torch.from_numpy(np.random.uniform(1, 2, size=[2, ])).type(torch.int32).npu()
top_ps = torch.from_numpy(np.random.uniform(0.4, 0.5, size=[2, ])).type(torch.float16).npu()
q = None
min_ps = torch.from_numpy(np.random.uniform(0.1, 0.5, size=[2, ])).type(torch.float16).npu()
post_sample = 'multiNomial'
if post_sample == "multiNomial":
    generator_npu = torch.Generator(device="npu")
    generator_npu.manual_seed(1)
else:
    generator_npu = None
npu_out_index, logits_top_kp_select = torch_npu.npu_top_k_top_p_sample(logits, top_ks, top_ps, q=q, min_ps=min_ps, eps=1e-8, is_need_logits=True, top_k_guess=32, ks_max=1024, input_is_logits=True, post_sample=post_sample, generator=generator_npu)
print(npu_out_index)
print(logits_top_kp_select)

# --- added by npu_anywhere tests: check the numbers ---
# top_ks = int32(uniform(1, 2)) = 1: top-1 keeps only each row's largest logit (the lower
# index on a tie), so top-p, min-p and the multinomial draw all have one token left: the
# index is that token and logits_top_kp_select holds its logit (as float32), -inf elsewhere.
x64 = logits.cpu().double()
assert top_ks.cpu().tolist() == [1, 1]
assert npu_out_index.dtype == torch.int64 and npu_out_index.shape == (2,)
assert logits_top_kp_select.dtype == torch.float32 and logits_top_kp_select.shape == (2, 4)
for b in range(2):
    row = x64[b].tolist()
    best = sorted(range(4), key=lambda i: (-row[i], i))[0]
    assert int(npu_out_index[b]) == best, (b, npu_out_index, row)
    want = [row[i] if i == best else float("-inf") for i in range(4)]
    assert logits_top_kp_select[b].cpu().double().tolist() == want
print("EXAMPLE OK")
