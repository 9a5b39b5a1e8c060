# Seed 000, section 9.2 (Ascend 950 训练模式调用，自动微分): apply_rotary_pos_emb with backward.
# Copied from the documentation; only the indentation and the `=`, `+`, quotes and `>` that the
# seed text lost were restored.
import torch
import torch_npu
from cann_ops_transformer.ops import apply_rotary_pos_emb

torch_npu.npu.set_device(0)

B, S, N, D = 1, 64, 8, 128

query = torch.randn(B, S, N, D, device="npu", dtype=torch.float16, requires_grad=True)
key = torch.randn(B, S, N, D, device="npu", dtype=torch.float16, requires_grad=True)
cos = torch.randn(B, S, 1, D, device="npu", dtype=torch.float16, requires_grad=True)
sin = torch.randn(B, S, 1, D, device="npu", dtype=torch.float16, requires_grad=True)

# 正向返回q_embed、k_embed自动追踪计算图
query_out, key_out = apply_rotary_pos_emb(
    query, key, cos, sin,
    layout="BSND",
    rotary_mode="half",  # 自动微分仅支持half模式
)

loss = query_out.sum() + key_out.sum()
loss.backward()  # 自动调用apply_rotary_pos_emb_grad

print(query.grad.shape)  # query梯度
print(key.grad.shape)    # key梯度
print(cos.grad.shape)    # cos梯度
print(sin.grad.shape)    # sin梯度

# --- added by npu_anywhere tests: check the numbers ---
# Forward (seed 000, section 3.1, half):  x_embed = (x * cos) + cat((-x2, x1), -1) * sin.
# Backward: the gradients of that formula, evaluated by autograd in float64 on the same inputs.
def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


inputs = {"query": query, "key": key, "cos": cos, "sin": sin}
ref = {name: t.detach().to(torch.float64).requires_grad_(True) for name, t in inputs.items()}
q_ref = ref["query"] * ref["cos"] + _rotate_half(ref["query"]) * ref["sin"]
k_ref = ref["key"] * ref["cos"] + _rotate_half(ref["key"]) * ref["sin"]
(q_ref.sum() + k_ref.sum()).backward()

for out, expected in ((query_out, q_ref), (key_out, k_ref)):
    assert out.shape == (B, S, N, D) and out.dtype == torch.float16
    torch.testing.assert_close(out.detach().to(torch.float64), expected.detach(),
                               rtol=2 ** -10, atol=1e-3)
for name, t in inputs.items():
    assert t.grad is not None, f"{name}.grad is None"
    assert t.grad.shape == t.shape, (name, t.grad.shape, t.shape)
    assert t.grad.dtype == t.dtype, (name, t.grad.dtype, t.dtype)
    # cos/sin gradients sum N=8 heads of two tensors: allow a couple of float16 ulps.
    torch.testing.assert_close(t.grad.to(torch.float64), ref[name].grad,
                               rtol=2 ** -9, atol=2e-3, msg=lambda m, name=name: f"{name}.grad: {m}")
print("EXAMPLE OK")
