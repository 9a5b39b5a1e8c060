"""``from torch_npu.contrib import transfer_to_npu`` first, then plain CUDA training code."""
from torch_npu.contrib import transfer_to_npu  # noqa: F401  (the usual first line)

import io
import os
import tempfile

import torch
import torch_npu

from model import TinyMLP, make_batch

local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
torch.cuda.manual_seed_all(1234)
assert torch.cuda.device_count() >= 1 and torch.cuda.current_device() == 0
assert torch.cuda.get_device_name(0) == torch_npu.npu.get_device_name() == "Ascend910B4"
assert torch.cuda.get_device_properties(0).total_memory > 0
assert torch.cuda.is_bf16_supported()
device = torch.device(f"cuda:{local_rank}")

# .cuda() / device="cuda" / .to("cuda") land on the stand-in, and a transfer copies.
host = torch.zeros(3)
dev = host.cuda()
dev.add_(1)
assert host.sum() == 0 and dev.sum() == 3 and dev.is_npu
assert torch.ones(2, device="cuda").is_npu and torch.ones(2).to(device).is_npu
assert torch.empty(2, device=device).device == dev.device
assert torch.zeros(2).to(0).is_npu and dev.to(0) is dev  # an int is a device index
assert isinstance(torch.cuda.FloatTensor(2), torch.cuda.FloatTensor)
assert torch.cuda.LongTensor([1, 2]).dtype == torch.int64

model = TinyMLP().cuda()
assert next(model.parameters()).is_npu
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler()
x, y = make_batch(32, "cuda")
x, y = x.cuda(non_blocking=True), y.to(device, non_blocking=True)

start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
stream = torch.cuda.Stream()
losses = []
start.record()
with torch.cuda.stream(stream):
    for _ in range(30):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            assert out.dtype == torch.float16  # autocast is active on the stand-in
            loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
end.record()
torch.cuda.synchronize()
assert start.elapsed_time(end) >= 0.0
assert losses[-1] < 0.5 * losses[0], losses
assert torch.cuda.memory_allocated() >= 0 and torch.cuda.max_memory_allocated() >= 0
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()

# One plain step against a float64 golden of the same SGD update.
with torch.cuda.amp.autocast(enabled=False):
    w_before = model.fc2.weight.detach().double().clone()
    opt.zero_grad()
    h = torch.relu(model.fc1(x))
    loss = ((model.fc2(h) - y) ** 2).mean()
    loss.backward()
    h64 = h.detach().double()
    err = (h64 @ w_before.t() + model.fc2.bias.detach().double() - y.double())
    grad64 = 2 * (err.t() @ h64) / err.numel()
    opt.step()
torch.testing.assert_close(model.fc2.weight.detach().double(), w_before - 0.05 * grad64,
                           rtol=1e-5, atol=1e-6)

# Checkpoints round-trip through "cuda" locations.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "ckpt.pt")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    for location in ("cuda", "cuda:0", device, "npu", lambda s, loc: s):
        ckpt = torch.load(path, map_location=location)
        fresh = TinyMLP().cuda()
        fresh.load_state_dict(ckpt["model"])
        for p, q in zip(fresh.parameters(), model.parameters()):
            assert torch.equal(p, q)

# Random state of the "cuda" device is the stand-in's.
state = torch.cuda.get_rng_state()
first = torch.randn(3, device="cuda")
torch.cuda.set_rng_state(state)
assert torch.equal(torch.randn(3, device="cuda"), first)

# An "nccl" process group (one rank) runs on gloo.
if torch.distributed.is_available():
    with tempfile.TemporaryDirectory() as tmp:
        torch.distributed.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=0,
                                             world_size=1)
        total = torch.ones(2, device="cuda")
        torch.distributed.all_reduce(total)
        assert torch.equal(total, torch.ones(2))
        torch.distributed.destroy_process_group()
# uninstall() takes every patch back (torch.cuda, Tensor/Module methods, torch.Generator,
# autocast, the load registry); a second install() works again.
import npu_anywhere

patched_device_count = torch.cuda.device_count
npu_anywhere.uninstall()
assert torch.cuda.device_count is not patched_device_count
assert torch.cuda.device_count.__module__.startswith("torch.cuda")
assert torch.Generator is torch._C.Generator and not hasattr(torch.Tensor, "is_npu")
assert "torch_npu" not in __import__("sys").modules
assert not npu_anywhere.compat.torch_npu_present()    # at most the inert torch.npu left behind
try:
    torch.zeros(1).cuda()
except (RuntimeError, AssertionError):
    pass  # torch's own answer on a machine without CUDA
else:
    assert torch.cuda.is_available()
npu_anywhere.install()
assert torch.zeros(2).npu().is_npu and torch.Generator("npu").device.type == "cpu"
buf = io.BytesIO()
torch.save(torch.ones(1), buf)
buf.seek(0)
assert torch.equal(torch.load(buf, map_location="npu"), torch.ones(1))
print("CUDA TRAINING OK")
