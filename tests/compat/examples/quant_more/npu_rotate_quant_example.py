# Seed 004, torch_npu.npu_rotate_quant, 调用示例.  The seed's test_rotate_quant_mxfp4 is not
# valid Python (two argument lines in one call, a doc defect); this is op-plugin's current text
# of the same example (Ascend/op-plugin codegen/templates/_op_plugin_docs.py), copied unchanged.
import torch
import torch_npu
import numpy as np

def test_rotate_quant_int8(M=512, N=1024, K=1024):
    x = torch.randn(M, N, dtype=torch.bfloat16).npu()
    rotation = torch.randn(K, K, dtype=torch.bfloat16).npu()
    output, output_scale = torch_npu.npu_rotate_quant(
        x, rotation, dst_dtype=torch.int8
    )
    return output, output_scale

def test_rotate_quant_mxfp4(M=512, N=1024, K=128):
    x = torch.randn(M, N, dtype=torch.bfloat16).npu()
    rotation = torch.randn(K, K, dtype=torch.bfloat16).npu()
    output, output_scale = torch_npu.npu_rotate_quant(
        x, rotation, dst_dtype=torch_npu.float4_e2m1fn_x2, axis=-1, round_mode="rint"
    )
    return output, output_scale


def main():
    # int8 quantization, only supported on Atlas A2/A3
    output, output_scale = test_rotate_quant_int8()
    # mxfp4 quantization, only supported on Ascend 950PR/Ascend 950DT
    output, output_scale = test_rotate_quant_mxfp4()

if __name__ == "__main__":
    main()

# --- added by npu_anywhere tests: check the numbers ---
# Doc: x_rot = (x.reshape(M, N / K, K) @ rotation).reshape(M, N), stored in bfloat16, evaluated
# in float64 here (the bfloat16 rounding of x_rot may go the other way, so a few values differ).
# The example's inputs are random: run each test again under a fixed seed and draw the same
# inputs.


def rerun(test, k):
    torch.manual_seed(0)
    out = test()
    torch.manual_seed(0)
    x = torch.randn(512, 1024, dtype=torch.bfloat16)
    rotation = torch.randn(k, k, dtype=torch.bfloat16)
    x_rot = (x.to(torch.float64).reshape(512, 1024 // k, k) @ rotation.to(torch.float64))
    return out, x_rot.reshape(512, 1024).to(torch.bfloat16).to(torch.float64)


# int8: scale = rowMax(|x_rot|) / 127;  y = round(x_rot / scale) (a value may differ by 1).
(output, output_scale), x_rot = rerun(test_rotate_quant_int8, 1024)
scale64 = x_rot.abs().amax(dim=-1) / 127
exact = x_rot / scale64[:, None]
assert output.dtype == torch.int8 and output.shape == (512, 1024), (output.dtype, output.shape)
assert output_scale.dtype == torch.float32 and output_scale.shape == (512,), output_scale.shape
torch.testing.assert_close(output_scale.to(torch.float64), scale64, rtol=1e-2, atol=0)
diff = (output.to(torch.float64) - torch.round(exact)).abs()
assert bool((diff <= 1).all()) and int((diff > 0).sum()) < output.numel() // 100, diff.sum()

# mxfp4: MX quantization in blocks of 32 (aclnnDynamicMxQuant, scale_alg 0): shared_exp =
# floor(log2(max|V|)) - 2 (emax of float4_e2m1), scale = 2^shared_exp as float8_e8m0 (code
# shared_exp + 127), y = float4_e2m1(V / scale) rounded half to even, saturating at 6, two codes
# per byte (low nibble first); scale shape (M, N / 64, 2).
(output, output_scale), x_rot = rerun(test_rotate_quant_mxfp4, 128)
blocks = x_rot.reshape(512, 32, 32)
shared = torch.floor(torch.log2(blocks.abs().amax(dim=-1, keepdim=True))) - 2
v = blocks / 2.0 ** shared
table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
dist = (v.abs().clamp(max=6.0).unsqueeze(-1) - table).abs()
ties = (dist == dist.min(dim=-1, keepdim=True).values).to(torch.int64)
# nearest table entry; on a tie the even code (round half to even)
code = torch.where(ties.sum(-1) > 1, (ties * torch.arange(8)).amax(-1) & ~1,
                   dist.argmin(dim=-1))
code = code | (torch.signbit(v).to(torch.int64) << 3)
packed = output.to(torch.int64)
got = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(512, 32, 32)
assert output.dtype == torch.uint8 and output.shape == (512, 512), (output.dtype, output.shape)
assert output_scale.dtype == torch.float8_e8m0fnu and output_scale.shape == (512, 16, 2)
want_scale = (shared.squeeze(-1) + 127).to(torch.int64).reshape(512, 16, 2)
assert int((output_scale.view(torch.uint8).to(torch.int64) != want_scale).sum()) <= 5
assert float((got != code).double().mean()) < 0.01, float((got != code).double().mean())
print("EXAMPLE OK")
