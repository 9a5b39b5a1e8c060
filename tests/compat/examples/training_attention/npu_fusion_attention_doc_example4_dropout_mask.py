# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fusion_attention.md, torch_npu.npu_fusion_attention,
# 使用外部dropout_mask的示例 (indentation restored).
import torch
import torch_npu

def example_with_dropout_mask():
    """
    使用外部dropout_mask实现可复现的dropout效果
    """
    B, N, S, D = 1, 8, 64, 64
    head_num = 8
    keep_prob = 0.9
    seed = 42
    offset = 0

    query = torch.randn(B, S, N * D, dtype=torch.float16, device="npu")
    key = torch.randn(B, S, N * D, dtype=torch.float16, device="npu")
    value = torch.randn(B, S, N * D, dtype=torch.float16, device="npu")

    dropout_mask = torch_npu._npu_dropout_gen_mask(
        torch.randn(1, device="npu"),
        [B, N, S, S],
        p=1 - keep_prob,
        seed=seed,
        offset=offset,
        parallel=True,
        sync=False
    )

    attention_score, softmax_max, softmax_sum, softmax_out, out_seed, out_offset, numels = \
        torch_npu.npu_fusion_attention(
            query, key, value,
            head_num=head_num,
            input_layout="BSH",
            scale=0.125,
            keep_prob=keep_prob,
            dropout_mask=dropout_mask,
            seed=seed,
            offset=offset
        )

    print(f"Output shape: {attention_score.shape}")
    print(f"Returned seed: {out_seed}, offset: {out_offset}, numels: {numels}")

    return attention_score

# --- added by npu_anywhere tests: check the numbers ---
def _check_numbers():
    import numpy as np
    torch.manual_seed(0)
    B, N, S, D, keep_prob = 1, 8, 64, 64, 0.9
    q, k, v = (torch.randn(B, S, N * D, dtype=torch.float16) for _ in range(3))
    mask = torch_npu._npu_dropout_gen_mask(torch.randn(1, device="npu"), [B, N, S, S],
                                           p=1 - keep_prob, seed=42, offset=0)
    assert mask.dtype == torch.uint8 and mask.shape == ((B * N * S * S + 127) // 128 * 16,)
    res = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=N,
                                         input_layout="BSH", scale=0.125, keep_prob=keep_prob,
                                         dropout_mask=mask, seed=42, offset=0)
    assert res[4:] == (42, 0, B * N * S * S)
    keep = torch.from_numpy(np.unpackbits(mask.cpu().numpy(), count=B * N * S * S,
                                          bitorder="little")).view(B, N, S, S).double()
    to4 = lambda t: t.double().view(B, S, N, D).transpose(1, 2)
    p = torch.softmax(to4(q) @ to4(k).transpose(-1, -2) * 0.125, -1) * keep / keep_prob
    want = (p @ to4(v)).transpose(1, 2).reshape(B, S, N * D)
    torch.testing.assert_close(res[0].cpu().double(), want, rtol=2e-3, atol=2e-3)
    # the op's own mask of (seed, offset) is the one _npu_dropout_gen_mask made
    own = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=N,
                                         input_layout="BSH", scale=0.125, keep_prob=keep_prob,
                                         seed=42, offset=0)[0]
    assert torch.equal(own, res[0])
    example_with_dropout_mask()
    print("EXAMPLE OK")


_check_numbers()
# --- end of the added block ---

if __name__ == "__main__":
    if torch.npu.is_available():
        example_with_dropout_mask()
