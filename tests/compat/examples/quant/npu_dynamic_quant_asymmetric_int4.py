# Seed 004, torch_npu.npu_dynamic_quant_asymmetric, 单算子模式调用 / 只有一个输入x, 进行int4量化.
# Copied from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 8), dtype=torch.half).npu()
y, scale, offset = torch_npu.npu_dynamic_quant_asymmetric(x, dst_type=torch.quint4x2)
print(y, scale, offset)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: int4 quantization uses DST_MAX 7, DST_MIN -8; y is int32 with the last dim / 8, each
# int32 holding 8 int4 results.  Unpacked with op-plugin's golden rule (low nibble first).
x64 = x.to(torch.float64)
mx, mn = x64.amax(-1, keepdim=True), x64.amin(-1, keepdim=True)
scale64 = (mx - mn) / 15
exact = x64 / scale64 + (7 - mx / scale64)
assert y.dtype == torch.int32 and y.shape == (3, 1), (y.dtype, y.shape)
torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
words = y.to(torch.int64) & 0xFFFFFFFF
nibbles = torch.stack([(words >> (4 * j)) & 0xF for j in range(8)], dim=-1).reshape(3, 8)
q = torch.where(nibbles >= 8, nibbles - 16, nibbles).double()
diff = (q - torch.round(exact).clamp(-8, 7)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-3
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (q, exact)
print("EXAMPLE OK")
