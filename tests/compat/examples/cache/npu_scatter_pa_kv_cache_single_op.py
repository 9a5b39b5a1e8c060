# Seed 004, torch_npu.npu_scatter_pa_kv_cache, 调用示例 / 单算子调用方式 (scenario 1: 3-D key and
# value into NZ caches).  Copied from the documentation; only the garbled name "block_si ze"
# in value_cache's shape is restored to "block_size" (op-plugin's copy of the page has it
# right).  The 入图方式 example needs torchair, which is not emulated.


# 单算子调用方式
import numpy as np
import torch
import torch_npu
# 生成随机数据, 并发送到npu
bs = 16
num_head = 4
k_head_size = 32
v_head_size = 64
num_blocks = 2
lastDim_k = 16
block_size = 32
key = np.random.randn(bs, num_head, k_head_size).astype(np.float16)
value = np.random.randn(bs, num_head, v_head_size).astype(np.float16)
key_cache = np.random.randn(
num_blocks, num_head * k_head_size // lastDim_k, block_size, lastDim_k).astype(np.float16)
value_cache = np.zeros(
(num_blocks, num_head * v_head_size // lastDim_k, block_size, lastDim_k)).astype(np.float16)
slot_mapping = np.random.choice(num_blocks * block_size, bs, replace=False).astype(np.int32)
key_npu = torch.from_numpy(key).npu()
value_npu = torch.from_numpy(value).npu()
key_cache_npu = torch.from_numpy(key_cache).npu()
value_cache_npu = torch.from_numpy(value_cache).npu()
key_cache_npu_cast = torch_npu.npu_format_cast(key_cache_npu.contiguous(), 29)
value_cache_npu_cast = torch_npu.npu_format_cast(value_cache_npu.contiguous(), 29)
slot_mapping_npu = torch.from_numpy(slot_mapping).npu()
# 调用ScatterPaKvCache算子
torch_npu.npu_scatter_pa_kv_cache(key_npu, value_npu, key_cache_npu_cast, value_cache_npu_cast, slot_mapping_npu)

# --- added by npu_anywhere tests: check the numbers ---
# op-plugin test_scatter_pa_kv_cache.py golden (PA_NZ), for token i with slot s:
#     block = s // block_size;  offset = s % block_size
#     token = key[i].reshape(num_head * k_head_size)
#     key_cache[block][c][offset][:] = token[c * lastDim_k : (c + 1) * lastDim_k]
# and every other entry keeps its value (random for key_cache, zero for value_cache).
expected_k = key_cache.copy()
expected_v = value_cache.copy()
for i, slot in enumerate(slot_mapping):
    block, offset = slot // block_size, slot % block_size
    token_k = key[i].reshape(num_head * k_head_size)
    for c in range(num_head * k_head_size // lastDim_k):
        expected_k[block][c][offset][:] = token_k[c * lastDim_k:(c + 1) * lastDim_k]
    token_v = value[i].reshape(num_head * v_head_size)
    for c in range(num_head * v_head_size // lastDim_k):
        expected_v[block][c][offset][:] = token_v[c * lastDim_k:(c + 1) * lastDim_k]
assert key_cache_npu_cast.shape == (2, 8, 32, 16) and value_cache_npu_cast.shape == (2, 16, 32, 16)
assert np.array_equal(key_cache_npu_cast.cpu().numpy().view(np.int16), expected_k.view(np.int16))
assert np.array_equal(value_cache_npu_cast.cpu().numpy().view(np.int16), expected_v.view(np.int16))
print("EXAMPLE OK")
