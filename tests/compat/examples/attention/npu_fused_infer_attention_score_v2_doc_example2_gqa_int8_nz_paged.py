# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md,
# 调用示例 / 示例2：GQA + KV NZ + PageAttention (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 10, 1, 128
KV_N = 1            # 组合 (10, 1)
block_size = 128     # 仅支持 128 或 512
KV_S = 1024          # key/value序列长度

# 计算block数量
block_num = (KV_S + block_size - 1) // block_size

# query: bfloat16, BNSD
q = torch.randn(B, Q_N, Q_S, D, dtype=torch.bfloat16).npu()

# key/value: int8, NZ格式 [blockNum, KV_N, D/32, blockSize, 32]
k = torch.randint(-128, 127, (block_num, KV_N, D // 32, block_size, 32), dtype=torch.int8).npu()
v = torch.randint(-128, 127, (block_num, KV_N, D // 32, block_size, 32), dtype=torch.int8).npu()

# dequant_scale: perchannel模式, bfloat16
# layout=BNSD时shape为 [KV_N, 1, D]
dequant_scale_key = torch.randn(KV_N, 1, D, dtype=torch.bfloat16).npu()
dequant_scale_value = torch.randn(KV_N, 1, D, dtype=torch.bfloat16).npu()

# block_table: page attention映射表
block_table = torch.arange(block_num, dtype=torch.int32).reshape(B, block_num).npu()

softmax_scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score_v2(q, k, v,
         dequant_scale_key=dequant_scale_key, dequant_scale_value=dequant_scale_value, 
         key_quant_mode=0, value_quant_mode=0, 
         block_table=block_table, actual_seq_kvlen=[KV_S],
         num_query_heads=Q_N, num_key_value_heads=KV_N,
         input_layout="BNSD", softmax_scale=softmax_scale, block_size=block_size,
         inner_precise=1 #高性能模式
         )

print(out)

# --- added by npu_anywhere tests: check the numbers ---
# NZ [blockNum, KV_N, D/32, blockSize, 32] -> rows of the cache in block-table order (arange).
kd = k.permute(0, 3, 1, 2, 4).reshape(block_num * block_size, KV_N, D)[:KV_S].double()
vd = v.permute(0, 3, 1, 2, 4).reshape(block_num * block_size, KV_N, D)[:KV_S].double()
kf = kd * dequant_scale_key.double().reshape(1, KV_N, D)
vf = vd * dequant_scale_value.double().reshape(1, KV_N, D)
qd = q.double()[0, :, 0]                                               # [Q_N, D]
expected = torch.stack([torch.softmax(qd[h] @ kf[:, 0].T * softmax_scale, -1) @ vf[:, 0]
                        for h in range(Q_N)])
assert out.shape == (1, Q_N, 1, D) and out.dtype == torch.bfloat16
torch.testing.assert_close(out[0, :, 0].double(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
print("EXAMPLE OK")
