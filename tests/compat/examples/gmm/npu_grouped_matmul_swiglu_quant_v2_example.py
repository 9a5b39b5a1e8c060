# Seed 004, torch_npu.npu_grouped_matmul_swiglu_quant_v2, 调用示例.  Copied from the
# documentation with one change: main calls the test with K=256, N=512 (the documented
# defaults K=7168, N=4096 take minutes as int8 matmuls on a CPU).  group_list has 2 entries
# for 16 experts, as in the doc: the first two experts take 128 rows each.
import torch
import torch_npu
import numpy as np


def test_grouped_matmul_swiglu_quant_v2(E=16, M=512, K=7168, N=4096):
    x = torch.randint(-128, 127, (M, K), dtype=torch.int8).npu()
    weight = torch.randint(-128, 127, (E, K, N), dtype=torch.int8).npu()
    weight_npu = torch_npu.npu_format_cast(weight, 29)
    weight_scale = torch.randn(E, N, dtype=torch.float32).npu()
    x_scale = torch.randn(M, dtype=torch.float32).npu()
    group_list = torch.tensor([128, 128], dtype=torch.int64).npu()
    output, output_scale = torch_npu.npu_grouped_matmul_swiglu_quant_v2(
        x, [weight_npu], [weight_scale], x_scale, group_list, bias=None
    )
    return output, output_scale, (x, weight, weight_scale, x_scale, group_list)


def main():
    return test_grouped_matmul_swiglu_quant_v2(K=256, N=512)


if __name__ == "__main__":
    output, output_scale, inputs = main()

    # --- added by npu_anywhere tests: check the numbers ---
    # group_list is a cumsum (the default): [128, 128] gives expert 0 rows 0..127 and expert 1
    # none.  c = (x @ w[e]) * x_scale[r] * weight_scale[e]; s = silu(c[:, :N/2]) * c[:, N/2:];
    # output = round(s * 127 / max|s|) per row, output_scale = max|s| / 127.
    x, weight, weight_scale, x_scale, group_list = inputs
    valid = 128
    c = (x[:valid].long() @ weight[0].long()).double() * weight_scale[0].double() \
        * x_scale[:valid, None].double()
    a, g = c[:, :256], c[:, 256:]
    s = a / (1 + torch.exp(-a)) * g
    amax = s.abs().amax(-1)
    assert output.shape == (512, 256) and output.dtype == torch.int8
    assert output_scale.shape == (512,) and output_scale.dtype == torch.float32
    torch.testing.assert_close(output_scale[:valid].double(), amax / 127, rtol=1e-4, atol=0)
    err = (output[:valid].double() - s * 127 / amax[:, None]).abs()
    assert err.max() <= 1.0 and (err <= 0.5 + 1e-3).float().mean() > 0.99, err.max()
    print("EXAMPLE OK")
