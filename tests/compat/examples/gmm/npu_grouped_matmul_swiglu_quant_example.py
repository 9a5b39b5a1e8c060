# Seed 004, torch_npu.npu_grouped_matmul_swiglu_quant, 调用示例.  Copied from the
# documentation with one change: gen_input_data is called with K=256, N=512 (the documented
# defaults K=7168, N=4096 take minutes as int8 matmuls on a CPU).
import torch
import torch_npu
import numpy as np


def generate_non_decreasing_sequence(length, upper_limit):
    # 生成随机增量
    random_increments = torch.randint(1, 128, (length,), dtype=torch.int64)  # 避免零增量
    # 累加生成非递减序列
    sequence = torch.cumsum(random_increments, dim=0)
    # 确保最后一个元素不超过上限
    if sequence[-1] > upper_limit:
        # 线性缩放以确保总和不超过上限
        scale_factor = upper_limit / sequence[-1].item()
        sequence = (sequence * scale_factor).to(torch.int64)
    for i in range(1, length):
        if sequence[i] <= sequence[i-1]:
            sequence[i] = sequence[i-1] + 1
    return sequence


def gen_input_data(E=16, M=512, K=7168, N=4096):
    x = torch.randint(-128, 127, (M, K), dtype=torch.int8).npu()
    weight = torch.randint(-128, 127, (E, K, N), dtype=torch.int8).npu()
    weight_npu = torch_npu.npu_format_cast(weight.npu(), 29)
    weight_scale = torch.randn(E, N, dtype=torch.float32).npu()
    x_scale = torch.randn(M, dtype=torch.float32).npu()
    group_list = generate_non_decreasing_sequence(E, M).npu()
    output, output_scale, output_offset = torch_npu.npu_grouped_matmul_swiglu_quant(
        x, weight_npu, group_list, weight_scale, x_scale,
        bias=None,
        offset=None
    )
    return output, output_scale, output_offset, (x, weight, weight_scale, x_scale, group_list)


def main():
    return gen_input_data(K=256, N=512)


if __name__ == "__main__":
    output, output_scale, output_offset, inputs = main()

    # --- added by npu_anywhere tests: check the numbers ---
    # c = (x @ w[e]) * weight_scale[e] * x_scale[r]; s = silu(c[:, :N/2]) * c[:, N/2:];
    # output = round(s * 127 / max|s|) per row, output_scale = max|s| / 127; valid rows end at
    # group_list[-1] (the doc: cut the rest off).
    x, weight, weight_scale, x_scale, group_list = inputs
    ends = group_list.tolist()
    c = torch.zeros(x.shape[0], weight.shape[2], dtype=torch.float64)
    start = 0
    for e, end in enumerate(ends):
        c[start:end] = (x[start:end].long() @ weight[e].long()).double() \
            * weight_scale[e].double() * x_scale[start:end, None].double()
        start = end
    valid = ends[-1]
    a, g = c[:valid, :256], c[:valid, 256:]
    s = a / (1 + torch.exp(-a)) * g
    amax = s.abs().amax(-1)
    assert output.shape == (512, 256) and output.dtype == torch.int8
    assert output_scale.shape == (512,) and output_scale.dtype == torch.float32
    torch.testing.assert_close(output_scale[:valid].double(), amax / 127, rtol=1e-4, atol=0)
    err = (output[:valid].double() - s * 127 / amax[:, None]).abs()
    assert err.max() <= 1.0 and (err <= 0.5 + 1e-3).float().mean() > 0.99, err.max()
    print("EXAMPLE OK")
