# seed 004, torch_npu.npu_fusion_attention, 使用pse位置编码的示例 (indentation restored).
import math
import torch
import torch_npu
def example_with_pse():
    # Set random seeds so the example is reproducible.
    torch.manual_seed(0)
    torch.npu.manual_seed(0)
    # B: batch size, N: head num, S: sequence length, D: head dim.
    B, N, S, D = 1, 4, 16, 64
    scale = 1.0 / math.sqrt(D)
    query = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    key = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    value = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    # Build pse in BNSS format; it is added directly to the attention scores.
    pse = torch.randn(B, N, S, S, dtype=torch.float16, device="npu") * 0.01 # BNSS
    attention_score = torch_npu.npu_fusion_attention(
        query,
        key,
        value,
        head_num=N,
        input_layout="BNSD",
        pse=pse,
        scale=scale,
        keep_prob=1.0,
    )[0]
    # Reference implementation: softmax(scale * QK^T + pse) * V.
    ref_scores = torch.matmul(query.float().cpu(), key.float().cpu().transpose(2, 3)) * scale
    ref_out = torch.matmul(torch.softmax(ref_scores + pse.float().cpu(), dim=-1), value.float().cpu())
    max_diff = (attention_score.float().cpu() - ref_out).abs().max().item()
    print(f"attention_score shape: {attention_score.shape}, max_diff: {max_diff:.6f}")
# --- added by npu_anywhere tests: check the numbers ---
def _check_numbers():
    torch.manual_seed(0)
    B, N, S, D = 1, 4, 16, 64
    scale = 1.0 / math.sqrt(D)
    q, k, v = (torch.randn(B, N, S, D, dtype=torch.float16) for _ in range(3))
    pse = torch.randn(B, N, S, S, dtype=torch.float16) * 0.01
    out = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=N,
                                         input_layout="BNSD", pse=pse.npu(), scale=scale)[0]
    # the formula's scale * (pse + q k^T); the example's own reference adds pse after the scale
    s = (q.double() @ k.double().transpose(2, 3) + pse.double()) * scale
    want = torch.softmax(s, -1) @ v.double()
    assert out.dtype == torch.float16 and out.shape == (B, N, S, D)
    torch.testing.assert_close(out.cpu().double(), want, rtol=2e-3, atol=2e-3)
    print("EXAMPLE OK")


_check_numbers()
# --- end of the added block ---

if __name__ == "__main__":
    if torch.npu.is_available():
        example_with_pse()
