# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mrope.md, 调用示例, "MRoPE示例（四段
# mrope_section）".  Copied from the documentation unchanged.
import torch
import torch_npu

num_tokens = 8
num_q_heads = 32
num_kv_heads = num_q_heads
head_size = 128
max_seq_len = num_tokens
rotary_dim = head_size

positions_mrope4 = torch.arange(num_tokens, dtype=torch.int64).repeat(4, 1).npu()
query = torch.rand(num_tokens, num_q_heads * head_size, dtype=torch.float32).npu()
key = torch.rand(num_tokens, num_kv_heads * head_size, dtype=torch.float32).npu()
cos_sin_cache = torch.rand(max_seq_len, rotary_dim, dtype=torch.float32).npu()

mrope_section_4 = [16, 16, 16, 16]
query_out, key_out = torch_npu.npu_mrope(
  positions_mrope4,
  query,
  key,
  cos_sin_cache,
  head_size,
  mrope_section=mrope_section_4,
  rotary_mode="half",
  cache_mode="default",
)

# --- added by npu_anywhere tests: check the numbers ---
# The same page's formula (M-RoPE, cache_mode default, four sections; rotary_mode half), in
# float64:
#     cos, sin = cosSinCache[positions[i]].chunk(2, dim=-1)
#     cos = cat([m[i] for i, m in enumerate(cos.split(mropeSection, dim=-1))], dim=-1)  (sin alike)
#     x1, x2 = chunk(query[..., :rotaryDim], 2);  out = cat(x1*cos - x2*sin, x2*cos + x1*sin)
cos, sin = cos_sin_cache.to(torch.float64)[positions_mrope4].chunk(2, dim=-1)
cos = torch.cat([m[i] for i, m in enumerate(cos.split(mrope_section_4, dim=-1))], dim=-1)
sin = torch.cat([m[i] for i, m in enumerate(sin.split(mrope_section_4, dim=-1))], dim=-1)


def _expected(x):
    heads = x.to(torch.float64).reshape(num_tokens, -1, head_size)
    x_rot, x_pass = heads[..., :rotary_dim], heads[..., rotary_dim:]
    x1, x2 = torch.chunk(x_rot, 2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    x_rot = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return torch.cat((x_rot, x_pass), dim=-1).reshape(x.shape)


for name, out, x in (("query", query_out, query), ("key", key_out, key)):
    assert out.shape == x.shape == (8, 32 * 128), (name, out.shape)
    assert out.dtype == torch.float32 and out.device == x.device, (name, out.dtype, out.device)
    torch.testing.assert_close(out.to(torch.float64), _expected(x), rtol=1e-6, atol=1e-6)
assert not torch.equal(query_out, query), "the rotation should change query"
print("EXAMPLE OK")
