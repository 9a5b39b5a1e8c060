# Seed 004, torch_npu.npu_hans_encode, 调用示例.  Copied unchanged except for the marked line:
# the seed's example uses ``dtype`` without defining it.
import torch
import torch_npu
dtype = torch.float16  # added: undefined in the seed
data_shape = (4096, 512)
statistic = True
reshuff = False
input_tensor = torch.randn(data_shape, dtype=dtype).npu()
pdf = torch.zeros(256, dtype=torch.int32).npu()
mantissa_numel = input_tensor.numel() * (input_tensor.element_size() - 1)
mantissa = torch.zeros(mantissa_numel // input_tensor.element_size(), dtype=input_tensor.dtype).npu()
fixed = torch.zeros(input_tensor.numel(), dtype=input_tensor.dtype).npu()
var = torch.zeros(input_tensor.numel(), dtype=input_tensor.dtype).npu()
pdf, mantissa, fixed, var = torch_npu.npu_hans_encode(input_tensor, statistic, reshuff, out=(pdf, mantissa, fixed, var))

# --- added by npu_anywhere tests: check the numbers ---
# statistic=True: pdf counts the exponent bytes (float16: the 8 bits below the sign) of every
# element; the encoding is lossless (checked by decoding it with npu_hans_decode).
bits = input_tensor.cpu().view(torch.int16).to(torch.int64) & 0xFFFF
want = torch.bincount(((bits >> 7) & 0xFF).reshape(-1), minlength=256)
assert pdf.shape == (256,) and pdf.dtype == torch.int32
assert torch.equal(pdf.cpu().to(torch.int64), want) and int(pdf.sum()) == 4096 * 512
recover = torch.zeros(data_shape, dtype=dtype).npu()
recover = torch_npu.npu_hans_decode(mantissa, fixed, var, pdf, reshuff, out=recover)
assert torch.equal(recover.cpu().view(torch.int16), input_tensor.cpu().view(torch.int16))
print("EXAMPLE OK")
