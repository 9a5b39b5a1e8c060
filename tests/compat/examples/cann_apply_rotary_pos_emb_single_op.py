# Seed 000, section 9.1 (单算子模式调用): cann_ops_transformer.ops.apply_rotary_pos_emb.
# Copied from the documentation; only the indentation and the `=`, quotes and `>` that the
# seed text lost were restored.
import torch
import torch_npu
from cann_ops_transformer.ops import apply_rotary_pos_emb

torch_npu.npu.set_device(0)

B = 1
S = 64
N = 8
D = 128

query = torch.randn(B, S, N, D, device="npu", dtype=torch.float16)
key = torch.randn(B, S, N, D, device="npu", dtype=torch.float16)
cos = torch.randn(B, S, 1, D, device="npu", dtype=torch.float16)
sin = torch.randn(B, S, 1, D, device="npu", dtype=torch.float16)

query_out, key_out = apply_rotary_pos_emb(
    query, key, cos, sin,
    layout="BSND",
    rotary_mode="half",
)

print(f"Output query shape: {query_out.shape}")
print(f"Output key shape: {key_out.shape}")

# --- added by npu_anywhere tests: check the numbers ---
# Seed 000, section 3.1 (half):  q_embed = (query * cos) + query_rotate * sin,
# query_rotate = cat((-query[..., D//2:], query[..., :D//2]), dim=-1); k_embed likewise.
# Section 4.4: new tensors with the shape and dtype of query/key; the inputs are not modified.
def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


q64, k64, c64, s64 = (t.detach().to(torch.float64) for t in (query, key, cos, sin))
for name, out, inp, ref in (("query", query_out, query, q64 * c64 + _rotate_half(q64) * s64),
                            ("key", key_out, key, k64 * c64 + _rotate_half(k64) * s64)):
    assert out.shape == (B, S, N, D) and out.dtype == torch.float16, (name, out.shape, out.dtype)
    assert out.device == inp.device, (name, out.device, inp.device)
    assert out.data_ptr() != inp.data_ptr(), f"{name}_out must be a new tensor"
    # float16 output: one rounding of the exact value (half an ulp, 2**-11 relative).
    torch.testing.assert_close(out.to(torch.float64), ref, rtol=2 ** -10, atol=1e-3)
assert not torch.equal(query_out, query), "the rotation should change query"
print("EXAMPLE OK")
