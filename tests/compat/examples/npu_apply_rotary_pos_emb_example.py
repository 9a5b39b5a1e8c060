# Seed 004, torch_npu.npu_apply_rotary_pos_emb, 调用示例.  Copied from the documentation; only
# the indentation that the seed text lost was restored.
import torch
import torch_npu

def test_npu_apply_rotary_pos_emb():
    batch = 1
    seq_len = 64
    num_heads = 8
    head_dim = 64
    query = torch.randn(batch, seq_len, num_heads, head_dim, dtype=torch.float16).npu()
    key = torch.randn(batch, seq_len, num_heads, head_dim, dtype=torch.float16).npu()
    cos = torch.randn(batch, seq_len, 1, head_dim, dtype=torch.float16).npu()
    sin = torch.randn(batch, seq_len, 1, head_dim, dtype=torch.float16).npu()
    q_out, k_out = torch_npu.npu_apply_rotary_pos_emb(
        query, key, cos, sin,
        layout="BSND",
        rotary_mode="half"
    )
    print("API: npu_apply_rotary_pos_emb test passed!")

if __name__ == "__main__":
    test_npu_apply_rotary_pos_emb()

# --- added by npu_anywhere tests: check the numbers ---
# The documented function keeps its tensors local, so run it once more while watching the call.
# Formula (seed 000, section 3.1, the same ApplyRotaryPosEmb kernel; half mode):
#     x_out = (x * cos) + cat((-x2, x1), dim=-1) * sin
# Seed 004, 返回值说明: query_out / key_out are query / key updated in place (原地更新).
_calls = []
_documented_op = torch_npu.npu_apply_rotary_pos_emb


def _watch(query, key, cos, sin, **kwargs):
    before = [t.detach().to(torch.float64).clone() for t in (query, key, cos, sin)]
    q_out, k_out = _documented_op(query, key, cos, sin, **kwargs)
    _calls.append((query, key, before, kwargs, q_out, k_out))
    return q_out, k_out


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


torch_npu.npu_apply_rotary_pos_emb = _watch
try:
    test_npu_apply_rotary_pos_emb()
finally:
    torch_npu.npu_apply_rotary_pos_emb = _documented_op
assert len(_calls) == 1, _calls
query, key, (q64, k64, c64, s64), kwargs, q_out, k_out = _calls[0]
assert kwargs == {"layout": "BSND", "rotary_mode": "half"}, kwargs
for name, out, inp, ref in (("query", q_out, query, q64 * c64 + _rotate_half(q64) * s64),
                            ("key", k_out, key, k64 * c64 + _rotate_half(k64) * s64)):
    assert out.shape == (1, 64, 8, 64) and out.dtype == torch.float16, (name, out.shape, out.dtype)
    assert out.data_ptr() == inp.data_ptr(), f"{name}_out must be {name}, updated in place"
    assert torch.equal(inp, out)
    torch.testing.assert_close(out.to(torch.float64), ref, rtol=2 ** -10, atol=1e-3)
assert not torch.equal(q_out.to(torch.float64), q64), "the rotation should change query"
print("EXAMPLE OK")
