# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md,
# 调用示例 / 示例6：伪量化（KV分离模式）+ Decode (copied as is).
import torch
import torch_npu
import math


B, Q_N, Q_S, D = 1, 8, 1, 128       # Q_S=1 增量推理
KV_N = 2                            
KV_S = 2048

# query: bfloat16, BNSD
q = torch.randn(B, Q_N, Q_S, D, dtype=torch.bfloat16).npu()
k = torch.randint(-128, 127, (B, KV_N, KV_S, D), dtype=torch.int8).npu()
v = torch.randint(-128, 127, (B, KV_N, KV_S, D), dtype=torch.int8).npu()

# dequant_scale: 必传，perchannel，dtype与query一致
# shape = (1, KV_N, 1, D)
dequant_scale_key   = torch.randn(1, KV_N, 1, D, dtype=torch.bfloat16).npu()
dequant_scale_value = torch.randn(1, KV_N, 1, D, dtype=torch.bfloat16).npu()
# dequant_offset: 可选，shape与scale一致

softmax_scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score_v2(
    q, k, v,
    dequant_scale_key=dequant_scale_key,            # KV分离：key反量化因子
    dequant_scale_value=dequant_scale_value,        # KV分离：value反量化因子
    key_quant_mode=0,                               # perchannel
    value_quant_mode=0,                             # perchannel，需与key一致
    num_query_heads=Q_N,
    num_key_value_heads=KV_N,
    input_layout="BNSD",
    softmax_scale=softmax_scale
)

print(out.dtype)   # torch.bfloat16
print(out.shape)   # torch.Size([1, 8, 1, 128])

# --- added by npu_anywhere tests: check the numbers ---
kf, vf = k.double() * dequant_scale_key.double(), v.double() * dequant_scale_value.double()
qd = q.double()[0, :, 0]
expected = torch.stack([torch.softmax(qd[h] @ kf[0, h // 4].T * softmax_scale, -1) @ vf[0, h // 4]
                        for h in range(Q_N)])
assert out.dtype == torch.bfloat16 and out.shape == (1, 8, 1, 128)
torch.testing.assert_close(out[0, :, 0].double(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
print("EXAMPLE OK")
