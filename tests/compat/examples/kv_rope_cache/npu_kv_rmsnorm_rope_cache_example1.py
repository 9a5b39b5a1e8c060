# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_rmsnorm_rope_cache.md, 调用示例 /
# 单算子模式调用, 示例1 (PA_BNSD).  Copied from the documentation; only the markdown list
# indentation is removed.


# 示例1：基础样例（非量化，cache_mode="PA_BNSD"）
import torch
import torch_npu

batch_size=8
seq_len=1
page_num=8
page_size=128
input_dtype = torch.float16

kv = torch.randn(batch_size, 1, seq_len, 576, dtype = input_dtype).npu()
gamma = torch.randn(512, dtype = input_dtype).npu()
cos = torch.randn(batch_size, 1, seq_len, 64, dtype = input_dtype).npu()
sin = torch.randn(batch_size, 1, seq_len, 64, dtype = input_dtype).npu()

k_cache = torch.ones(page_num, page_size, 1, 64, dtype = input_dtype).npu()
ckv_cache = torch.ones(page_num, page_size, 1, 512, dtype = input_dtype).npu()
k_rope_scale = None
c_kv_scale = None
cache_mode="PA_BNSD"
index_shape = (batch_size * seq_len,)
index = torch.arange(start=0, end=index_shape[0], step=1, dtype=torch.int64).npu()
is_output_kv = True


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, kv, gamma, cos, sin, index, k_cache, ckv_cache,
                k_rope_scale=None, c_kv_scale=None, k_rope_offset=None, c_kv_offset=None,
                epsilon=1e-05, cache_mode="Norm", is_output_kv=False):
        k_cache, v_cache, k_rope, c_kv = torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index,
                                                                             k_cache, ckv_cache,
                                                                             k_rope_scale=k_rope_scale,
                                                                             c_kv_scale=c_kv_scale,
                                                                             k_rope_offset=k_rope_offset,
                                                                             c_kv_offset=c_kv_offset,
                                                                             epsilon=epsilon,
                                                                             cache_mode=cache_mode,
                                                                             is_output_kv=is_output_kv)
        return k_cache, v_cache, k_rope, c_kv

model = Model().npu()
_, _, k_rope, c_kv = model(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale, None, None, 1e-5, cache_mode, is_output_kv)


# --- added by npu_anywhere tests: check the numbers ---
# The call's outputs are k_rope (RoPE of kv[..., 512:]) and c_kv (RMSNorm of kv[..., :512]);
# the caches were updated in place at slots index (PA_BNSD: slot = block * 128 + offset).
import math
Dv = 512
x = kv.double()[..., :Dv]
y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * gamma.double()
r = kv.double()[..., Dv:]
x1, x2 = r[..., ::2], r[..., 1::2]
k = torch.cat((x1, x2), -1) * cos.double() + torch.cat((-x2, x1), -1) * sin.double()
torch.testing.assert_close(k_rope.double(), k, rtol=2e-3, atol=2e-3)
torch.testing.assert_close(c_kv.double(), y, rtol=2e-3, atol=2e-3)
for t in range(batch_size * seq_len):
    slot = int(index[t])
    b, s = divmod(t, seq_len)
    torch.testing.assert_close(k_cache[slot // page_size, slot % page_size, 0].double(),
                               k[b, 0, s], rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(ckv_cache[slot // page_size, slot % page_size, 0].double(),
                               y[b, 0, s], rtol=2e-3, atol=2e-3)
written = torch.zeros(page_num * page_size, dtype=torch.bool)
written[index] = True
assert bool((k_cache.reshape(-1, 64)[~written] == 1).all())
assert bool((ckv_cache.reshape(-1, 512)[~written] == 1).all())
print("EXAMPLE OK")
