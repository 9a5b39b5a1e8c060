# Seed 004, torch_npu.npu_rotate_quant, 调用示例.  Copied from the documentation with the
# indentation the seed text lost restored.  test_rotate_quant_mxfp4 is left out: in the seed it
# is not valid Python (two argument lines in one call, a doc defect), and its MX output (950
# only) is not emulated; main() never calls it.
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
def main():
    output, output_scale = test_rotate_quant_int8()
if __name__ == "__main__":
    main()

# --- added by npu_anywhere tests: check the numbers ---
# Doc: x_rot = (x.reshape(M, N / K, K) @ rotation).reshape(M, N) (stored in x's dtype);
# scale = rowMax(|x_rot|) / 127;  y = round(x_rot / scale).  Evaluated in float64 (the bfloat16
# rounding of x_rot may go the other way, so a value may differ by 1).
# The example's inputs are random: run it again under a fixed seed and draw the same inputs.
torch.manual_seed(0)
output, output_scale = test_rotate_quant_int8()
torch.manual_seed(0)
x = torch.randn(512, 1024, dtype=torch.bfloat16)
rotation = torch.randn(1024, 1024, dtype=torch.bfloat16)
x_rot = (x.to(torch.float64).reshape(512, 1, 1024) @ rotation.to(torch.float64)).reshape(512, 1024)
x_rot = x_rot.to(torch.bfloat16).to(torch.float64)
scale64 = x_rot.abs().amax(dim=-1) / 127
exact = x_rot / scale64[:, None]
assert output.dtype == torch.int8 and output.shape == (512, 1024), (output.dtype, output.shape)
assert output_scale.dtype == torch.float32 and output_scale.shape == (512,), output_scale.shape
torch.testing.assert_close(output_scale.to(torch.float64), scale64, rtol=1e-2, atol=0)
diff = (output.to(torch.float64) - torch.round(exact)).abs()
assert bool((diff <= 1).all()) and int((diff > 0).sum()) < output.numel() // 100, diff.sum()
print("EXAMPLE OK")
