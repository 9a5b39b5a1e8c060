# Seed 004, torch_npu.npu_fused_cross_entropy_loss_with_max_sum, 示例.  Copied unchanged (the
# doctest prompts removed).
import torch
import torch_npu
logits_max = torch.randn(128, dtype=torch.float32).npu()
sum_exp_logits = torch.randn(128, dtype=torch.float32).npu()
predicted_logits = torch.randn(128, dtype=torch.float32).npu()
vocab_parallel_logits = torch.randn(128, 256, dtype=torch.float16).npu()
loss, softmax = torch_npu.npu_fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits=vocab_parallel_logits)

# --- added by npu_anywhere tests: check the numbers ---
# loss = log(sum_exp) - predicted (NaN where the example's random sum_exp is negative);
# softmax = exp(logits - max) / sum_exp.
s = sum_exp_logits.cpu().double()
mx = logits_max.cpu().double()
torch.testing.assert_close(loss.cpu().double(), s.log() - predicted_logits.cpu().double(),
                           rtol=1e-5, atol=1e-5, equal_nan=True)
want = (vocab_parallel_logits.cpu().double() - mx[:, None]).exp() / s[:, None]
torch.testing.assert_close(softmax.cpu().double(), want, rtol=1e-5, atol=1e-6)
assert loss.dtype == softmax.dtype == torch.float32 and softmax.shape == (128, 256)
print("EXAMPLE OK")
