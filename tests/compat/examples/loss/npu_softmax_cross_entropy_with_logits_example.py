# op-plugin docs/zh/custom_APIs/torch_npu/（beta）torch_npu-npu_softmax_cross_entropy_with_logits.md,
# 调用示例 (seed 004 has no example for this op).  Copied unchanged, the doctest prompts removed
# and ``import torch, torch_npu`` written as two imports.
import torch
import torch_npu
batch_size = 4
num_classes = 12
features = torch.rand(1, batch_size * num_classes).npu()
labels = torch.rand(1, batch_size * num_classes).npu()
output = torch_npu.npu_softmax_cross_entropy_with_logits(features, labels)
print(output)

# --- added by npu_anywhere tests: check the numbers ---
# loss[n] = -sum_c labels[n, c] * log_softmax(features[n])[c], in float64.
x = features.cpu().double()
y = labels.cpu().double()
want = -(y * (x - x.logsumexp(-1, keepdim=True))).sum(-1)
torch.testing.assert_close(output.cpu().double(), want, rtol=1e-5, atol=1e-5)
assert output.shape == (1,) and output.dtype == torch.float32
print("EXAMPLE OK")
