# Seed 004, torch_npu.npu_hans_decode, 调用示例.  Copied unchanged except for the marked line:
# the seed's example uses ``dtype`` without defining it.
import torch
import torch_npu
dtype = torch.bfloat16  # added: undefined in the seed
data_shape = (4096, 512)
statistic = True
reshuff = False
input_tensor = torch.randn(data_shape, dtype=dtype).npu()
recover = torch.zeros(data_shape, dtype=dtype).npu()
pdf = torch.zeros(256, dtype=torch.int32).npu()
mantissa_numel = input_tensor.numel() * (input_tensor.element_size() - 1)
mantissa = torch.zeros(mantissa_numel // input_tensor.element_size(), dtype=input_tensor.dtype).npu()
fixed = torch.zeros(input_tensor.numel(), dtype=input_tensor.dtype).npu()
var = torch.zeros(input_tensor.numel(), dtype=input_tensor.dtype).npu()
pdf, mantissa, fixed, var = torch_npu.npu_hans_encode(input_tensor, statistic, reshuff, out=(pdf, mantissa, fixed, var))
recover = torch_npu.npu_hans_decode(mantissa, fixed, var, pdf, reshuff, out=recover)

# --- added by npu_anywhere tests: check the numbers ---
# Lossless: every element back bit for bit (compare the int16 bit patterns), in recover itself.
assert recover.shape == data_shape and recover.dtype == dtype
assert torch.equal(recover.cpu().view(torch.int16), input_tensor.cpu().view(torch.int16))
print("EXAMPLE OK")
