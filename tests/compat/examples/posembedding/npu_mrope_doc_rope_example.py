# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mrope.md, 调用示例, "RoPE示例" (1-D
# positions, mrope_section [0, 0, 0]).  Copied from the documentation unchanged.
import torch
import torch_npu

num_tokens = 8
num_q_heads = 32
num_kv_heads = num_q_heads
head_size = 128
max_seq_len = num_tokens
rotary_dim = head_size

positions_1d = torch.arange(num_tokens, dtype=torch.int64).npu()
query = torch.rand(num_tokens, num_q_heads * head_size, dtype=torch.float32).npu()
key = torch.rand(num_tokens, num_kv_heads * head_size, dtype=torch.float32).npu()
cos_sin_cache = torch.rand(max_seq_len, rotary_dim, dtype=torch.float32).npu()

query_out, key_out = torch_npu.npu_mrope(
  positions_1d,
  query,
  key,
  cos_sin_cache,
  head_size,
  mrope_section=[0, 0, 0],
  rotary_mode="half",
  cache_mode="default",
)

# --- added by npu_anywhere tests: check the numbers ---
# The same page's formula (RoPE mode; rotary_mode half), in float64:
#     cos, sin = cosSinCache[positions].chunk(2, dim=-1)
#     x1, x2 = chunk(query[..., :rotaryDim], 2);  out = cat(x1*cos - x2*sin, x2*cos + x1*sin)
cos, sin = cos_sin_cache.to(torch.float64)[positions_1d].chunk(2, dim=-1)


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
