# seed 004, torch_npu.npu_fusion_attention, 使用sink注意力头偏置的示例 (indentation restored).
import math
import torch
import torch_npu
def example_with_sink():
    # Set random seeds so the example is reproducible.
    torch.manual_seed(0)
    torch.npu.manual_seed(0)
    # B: batch size, N: head num, S: sequence length, D: head dim.
    B, N, S, D = 1, 4, 16, 64
    scale = 1.0 / math.sqrt(D)
    query = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    key = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    value = torch.randn(B, N, S, D, dtype=torch.float16, device="npu")
    # sink provides one extra bias value for each attention head, with shape [head_num].
    sink = torch.linspace(-0.2, 0.2, steps=N, dtype=torch.float32, device="npu") # [head_num]
    attention_score = torch_npu.npu_fusion_attention(
        query,
        key,
        value,
        head_num=N,
        input_layout="BNSD",
        sink=sink,
        scale=scale,
        keep_prob=1.0,
    )[0]
    # Reference implementation: append one sink logit, apply softmax, then drop that column before multiplying by V.
    ref_scores = torch.matmul(query.float().cpu(), key.float().cpu().transpose(2, 3)) * scale
    sink_scores = sink.cpu().view(1, N, 1, 1).expand(B, N, S, 1)
    ref_probs = torch.softmax(torch.cat([ref_scores, sink_scores], dim=-1), dim=-1)[..., :-1]
    ref_out = torch.matmul(ref_probs, value.float().cpu())
    max_diff = (attention_score.float().cpu() - ref_out).abs().max().item()
    print(f"attention_score shape: {attention_score.shape}, max_diff: {max_diff:.6f}")
# --- added by npu_anywhere tests: check the numbers ---
def _check_numbers():
    torch.manual_seed(0)
    B, N, S, D = 1, 4, 16, 64
    scale = 1.0 / math.sqrt(D)
    q, k, v = (torch.randn(B, N, S, D, dtype=torch.float16) for _ in range(3))
    sink = torch.linspace(-0.2, 0.2, steps=N, dtype=torch.float32)
    out = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=N,
                                         input_layout="BNSD", sink=sink.npu(), scale=scale)[0]
    s = q.double() @ k.double().transpose(2, 3) * scale
    col = sink.double().view(1, N, 1, 1).expand(B, N, S, 1)
    want = torch.softmax(torch.cat([s, col], -1), -1)[..., :-1] @ v.double()
    assert out.dtype == torch.float16 and out.shape == (B, N, S, D)
    torch.testing.assert_close(out.cpu().double(), want, rtol=2e-3, atol=2e-3)
    print("EXAMPLE OK")


_check_numbers()
# --- end of the added block ---

if __name__ == "__main__":
    if torch.npu.is_available():
        example_with_sink()
