# Seed 004, torch_npu.npu_fused_linear_online_max_sum, 示例.  Copied unchanged (the doctest
# prompts and the line continuation removed).
import torch
import torch_npu
input_tensor = torch.randn(128, 64, dtype=torch.float16).npu()
weight_tensor = torch.randn(256, 64, dtype=torch.float16).npu()
target_tensor = torch.randint(0, 256, (128,), dtype=torch.int32).npu()
logits_max, sum_exp_logits, predicted_logits, target_mask, masked_target, vocab_parallel_logits = torch_npu.npu_fused_linear_online_max_sum(input_tensor, weight_tensor, target_tensor, 0, 64, return_logits=True)

# --- added by npu_anywhere tests: check the numbers ---
# logits = input @ weight.T (float64 here); stats from them; a target is outside the shard when
# target >= 64 (vocab_end_index, exclusive as the kernel); mask bits least significant first.
logits = input_tensor.cpu().double() @ weight_tensor.cpu().double().t()
mx = logits.max(-1).values
t = target_tensor.cpu().long()
outside = t >= 64
torch.testing.assert_close(logits_max.cpu().double(), mx, rtol=1e-5, atol=1e-4)
torch.testing.assert_close(sum_exp_logits.cpu().double(), (logits - mx[:, None]).exp().sum(-1),
                           rtol=1e-4, atol=1e-5)
want_masked = torch.where(outside, 0, t)
assert torch.equal(masked_target.cpu().long(), want_masked) and masked_target.dtype == torch.int32
picked = (logits - mx[:, None]).gather(1, want_masked[:, None]).squeeze(1)
torch.testing.assert_close(predicted_logits.cpu().double(), torch.where(outside, 0.0, picked),
                           rtol=1e-4, atol=1e-4)
packed = [sum(int(outside[8 * k + j]) << j for j in range(8)) for k in range(16)]
assert target_mask.cpu().tolist() == packed and target_mask.dtype == torch.uint8
assert vocab_parallel_logits.dtype == torch.float16 and vocab_parallel_logits.shape == (128, 256)
torch.testing.assert_close(vocab_parallel_logits.cpu().double(), logits, rtol=2e-3, atol=2e-2)
print("EXAMPLE OK")
