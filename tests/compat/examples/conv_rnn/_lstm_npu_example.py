# seed 004, _lstm_npu, 调用示例.  Copied unchanged (the comments after the arguments kept).
import torch
import torch_npu
torch.npu.set_device(0)
device = torch.device("npu:0")
dtype = torch.float32
input_tensor = torch.randn((2, 3, 8), dtype=dtype, device=device)
h0 = torch.randn((2, 2, 4), dtype=dtype, device=device)
c0 = torch.randn((2, 2, 4), dtype=dtype, device=device)
hx = [h0, c0]
hidden_size = 4
gate_size = 4 * hidden_size
weight_ih = torch.randn((gate_size, 8), dtype=dtype, device=device)
weight_hh = torch.randn((gate_size, 4), dtype=dtype, device=device)
params = [weight_ih, weight_hh, weight_hh, weight_hh]
c0 = torch.randn((1, 2, 16), dtype=dtype, device=device)
batch_sizes = torch.randn((4*hidden_size), dtype=dtype, device=device)
input_tensor = input_tensor.to(device, dtype=dtype)
hx = [
t.to(device=device, dtype=dtype)
for t in hx
]
params = [
p.to(device=device, dtype=dtype)
for p in params
]
out, out_h, out_c, _, _, _, _, hn_list, cn_list, _ = torch_npu._lstm_npu(
input_tensor, # 1. input
hx, # 2. hx
params, # 3. params
False, # 4. has_biases
2, # 5. num_layers
0.0, # 6. dropout
False, # 7. train
False, # 8. bidirectional
batch_first=True, # 9. batch_first（位置参数，非关键字）
batch_sizes=None # 10. batch_sizes
)

# --- added by npu_anywhere tests: check the numbers ---
# A two-layer, bias-free, batch-first LSTM in float64 (torch's own LSTM kernel on CPU).
d = lambda t: t.cpu().double()  # noqa: E731
y_ref, h_ref, c_ref = torch._VF.lstm(d(input_tensor), [d(t) for t in hx],
                                     [d(p) for p in params], False, 2, 0.0, False, False, True)
torch.testing.assert_close(d(out), y_ref, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(d(out_h), h_ref, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(d(out_c), c_ref, rtol=1e-5, atol=1e-5)
assert out.shape == (2, 3, 4) and out_h.shape == out_c.shape == (2, 2, 4)
assert hn_list.shape == cn_list.shape == (2, 2, 4)       # train=False: final states per layer
print("EXAMPLE OK")
