# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mla_prolog_v3.md, 单算子模式调用.  Copied
# unchanged (seed 004's example of this op does not run as printed: see the report of the
# mla_prolog work; the graph-mode example needs torchair).
import torch
import torch_npu
import math
torch.npu.config.allow_internal_format = True
# 生成随机数据, 并发送到npu
B = 8
He = 7168
Hcq = 1536
Hckv = 512
N = 32
D = 128
Dr = 64
Skv = 1024
S = 2
Nkv = 1
BlockSize = 128
BlockNum = 64
token_x = torch.rand(B, S, He, dtype=torch.bfloat16).npu()
w_dq = torch.rand(He, Hcq, dtype=torch.bfloat16).npu()
w_dq_cast = torch_npu.npu_format_cast(w_dq.contiguous(), 29)
w_uq_qr = torch.rand(Hcq, N * (D + Dr), dtype=torch.bfloat16).npu()
w_uq_qr_cast = torch_npu.npu_format_cast(w_uq_qr.contiguous(), 29)
w_uk = torch.rand(N, D, Hckv, dtype=torch.bfloat16).npu()
w_dkv_kr = torch.rand(He, Hckv + Dr, dtype=torch.bfloat16).npu()
w_dkv_kr_cast = torch_npu.npu_format_cast(w_dkv_kr.contiguous(), 29)
rmsnorm_gamma_cq = torch.rand(Hcq, dtype=torch.bfloat16).npu()
rmsnorm_gamma_ckv = torch.rand(Hckv, dtype=torch.bfloat16).npu()
rope_sin = torch.rand(B, S, Dr, dtype=torch.bfloat16).npu()
rope_cos = torch.rand(B, S, Dr, dtype=torch.bfloat16).npu()
cache_index = torch.randint(0, BlockNum * BlockSize, (B, S), dtype=torch.int64).npu()
kv_cache = torch.rand(BlockNum, BlockSize, Nkv, Hckv, dtype=torch.bfloat16).npu()
kr_cache = torch.rand(BlockNum, BlockSize, Nkv, Dr, dtype=torch.bfloat16).npu()
rmsnorm_epsilon_cq = 1.0e-5
rmsnorm_epsilon_ckv = 1.0e-5
cache_mode = "PA_BSND"

# 调用MlaProlog算子
query_mla, query_rope_mla, dequant_scale_q_nope_mla, query_norm_mla, dequant_scale_q_norm_mla = torch_npu.npu_mla_prolog_v3(token_x, w_dq_cast, w_uq_qr_cast, w_uk, w_dkv_kr_cast, rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode)
print(query_mla)

# --- added by npu_anywhere tests: check the numbers ---
# The doc formula in float64 with the kernel's bfloat16 roundings (op-plugin's golden
# test_mla_prolog.py): c^Q = bf(RmsNorm(bf(x W^DQ))), q = bf(c^Q W^UQQR), q^N = bf(q[:D] W^UK),
# q^R = bf(ROPE(q[D:])); kv_cache <- RmsNorm(x W^DKV), kr_cache <- ROPE(x W^KR) (interleave-half).
def _bf(v):
    return v.to(torch.bfloat16).to(torch.float64)


def _rms(v, g, eps):
    return v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps) * g.cpu().double()


def _close(got, want):
    # bf16 outputs: within 2% of the golden, or 1% of its largest magnitude (RoPE's cancellations)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-2 * float(want.abs().max()))


def _rope(v, c, s):
    a, b = v[..., 0::2], v[..., 1::2]
    return torch.cat((a, b), -1) * c + torch.cat((-b, a), -1) * s


_T = B * S
_x = token_x.cpu().double().reshape(_T, He)
_cos = rope_cos.cpu().double().reshape(_T, Dr)
_sin = rope_sin.cpu().double().reshape(_T, Dr)
_cq = _bf(_rms(_bf(_x @ w_dq.cpu().double()), rmsnorm_gamma_cq, rmsnorm_epsilon_cq))
_q = _bf(_cq @ w_uq_qr.cpu().double()).reshape(_T, N, D + Dr)
_qn = _bf(torch.einsum("tnd,ndh->tnh", _bf(_q[..., :D]), w_uk.cpu().double()))
_qr = _bf(_rope(_q[..., D:], _cos[:, None], _sin[:, None]))
_close(query_mla.cpu().double().reshape(_T, N, Hckv), _qn)
_close(query_rope_mla.cpu().double().reshape(_T, N, Dr), _qr)
_kv = _x @ w_dkv_kr.cpu().double()
_ckv = _rms(_kv[:, :Hckv], rmsnorm_gamma_ckv, rmsnorm_epsilon_ckv)
_kr = _rope(_kv[:, Hckv:], _cos, _sin)
_slots = cache_index.cpu().reshape(-1).tolist()
_kv_rows = kv_cache.cpu().double().reshape(-1, Nkv, Hckv)
_kr_rows = kr_cache.cpu().double().reshape(-1, Nkv, Dr)
for _slot in set(_slots):
    # tokens sharing a slot: the NPU keeps one of them (npu_anywhere: the last)
    _tok = max(t for t, s_ in enumerate(_slots) if s_ == _slot)
    _close(_kv_rows[_slot, 0], _ckv[_tok])
    _close(_kr_rows[_slot, 0], _kr[_tok])
assert dequant_scale_q_nope_mla.shape == (0,) and query_norm_mla.shape == (0,)
print("EXAMPLE OK")
