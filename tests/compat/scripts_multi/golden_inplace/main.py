"""Device transfers copy as on an NPU; checkpoints, pinned memory, generators, autocast and
the device API of the npu stand-in; honest feature detection of unimplemented ops."""

import io
import warnings

import torch
import torch_npu

from golden_utils import assert_exact, scatter_nd_update_golden_

with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    torch.manual_seed(3)

# -- transfers copy: the CPU golden is written in place after the inputs went to the device --
data = torch.zeros(4, 3)
indices = torch.tensor([[1], [3]])
updates = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 1
npu_data = data.npu()
torch_npu.npu_scatter_nd_update_(npu_data, indices.npu(), updates.npu())
assert data.abs().sum() == 0, "the npu op wrote into the CPU tensor"
scatter_nd_update_golden_(data, indices, updates)
assert_exact(npu_data, data)

# .cpu() of npu memory is a copy: a snapshot taken before an in-place op stays as it was.
before = npu_data.cpu()
npu_data.add_(1)
assert_exact(before, data)
assert npu_data.cpu() is not npu_data and npu_data.to("cpu") is not npu_data

a = torch.zeros(3)
b = a.npu()
b.add_(1)
assert a.sum() == 0 and b.sum() == 3
assert a.to("npu") is not a and torch.zeros(2).to(device="npu:0").is_npu
# Same device -> the tensor itself, as torch does.
assert b.npu() is b and b.to("npu") is b and b.to(torch.device("npu", 0)) is b
assert b.to("npu", non_blocking=True) is b and b.to(b) is b
assert b.to(torch.zeros(1)) is not b  # to another tensor's device: the host
assert b.to("npu", copy=True) is not b
assert b.view(3).to("npu").data_ptr() == b.data_ptr()  # views share the device memory
half = b.to("npu", torch.float16)
assert half.dtype == torch.float16 and torch.equal(half.float(), b)
assert b.to(torch.float16).dtype == torch.float16
c = torch.ones(2, device="npu")
host = torch.ones(2)
as_npu = torch.as_tensor(host, device="npu")
assert as_npu is not host and as_npu.is_npu and torch.as_tensor(as_npu, device="npu") is as_npu
assert c.to("npu") is c and c.cpu() is not c
plain = torch.ones(2)
assert plain.cpu() is plain and plain.to("cpu") is plain  # host memory stays as torch has it
# A transfer is differentiable, and a copy of a leaf is not a leaf (as on a device).
leaf = torch.ones(2, requires_grad=True)
moved = leaf.npu()
assert not moved.is_leaf
(moved * 3).sum().backward()
assert torch.equal(leaf.grad, torch.full((2,), 3.0))
# Module.npu() moves parameters (copies) and keeps the Parameter objects.
lin = torch.nn.Linear(3, 2)
weight, weight_before = lin.weight, lin.weight.detach().clone()
lin.npu()
assert lin.weight is weight and torch.equal(lin.weight, weight_before)
assert lin.weight.npu() is lin.weight  # its storage is npu memory now
assert torch.ones(2).is_npu and b.is_npu

# Legacy typed-tensor conversions.
typed = torch.arange(3.0).type(torch.npu.HalfTensor)
assert typed.dtype == torch.float16 and typed.is_npu and typed.to("npu") is typed
assert torch.ones(2).type("torch.npu.LongTensor").dtype == torch.int64
assert torch.ones(2).type(torch.int32).dtype == torch.int32 and torch.ones(1).type() == "torch.FloatTensor"
assert isinstance(torch.npu.BFloat16Tensor(2, 2), torch.npu.BFloat16Tensor)

# Default-device contexts make npu memory too.
with torch.device("npu"):
    made = torch.zeros(2)
assert made.to("npu") is made and made.cpu() is not made
torch.set_default_device("npu")
made = torch.ones(2)
torch.set_default_device(None)
assert made.device == torch.ones(1).device and made.to("npu") is made

# -- checkpoints ------------------------------------------------------------------------------
state = {"w": torch.arange(4.0), "step": 7}
buf = io.BytesIO()
torch.save(state, buf)
for location in ("npu", "npu:0", torch.device("npu"), torch.device("npu", 0), {"cpu": "npu:0"}):
    buf.seek(0)
    loaded = torch.load(buf, map_location=location)
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7, location
    assert loaded["w"].npu() is loaded["w"], "a loaded npu tensor is on the npu already"

# A checkpoint written on an NPU: its storages are tagged "npu:0".
torch.serialization.register_package(0, lambda s: "npu:0" if tag_as_npu else None,
                                     lambda s, loc: None)
tag_as_npu = True
npu_buf = io.BytesIO()
torch.save({"w": torch.arange(3.0)}, npu_buf)
tag_as_npu = False
assert b"npu:0" in npu_buf.getvalue()
npu_buf.seek(0)
loaded = torch.load(npu_buf)
assert torch.equal(loaded["w"], torch.arange(3.0)) and loaded["w"].npu() is loaded["w"]

# -- pinned memory, generators ----------------------------------------------------------------
src = torch.arange(4.0)
pinned = src.pin_memory()
assert torch.equal(pinned, src) and pinned.data_ptr() != src.data_ptr()
assert torch.empty(3, pin_memory=True).shape == (3,)

g1 = torch.Generator(device="npu").manual_seed(11)
g2 = torch.Generator("npu:0")
g2.manual_seed(11)
assert isinstance(g1, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
assert torch.equal(torch.randn(5, generator=g1, device="npu"), torch.randn(5, generator=g2))
assert torch.Generator().device == torch.device("cpu")

# -- autocast ---------------------------------------------------------------------------------
m1, m2 = torch.randn(4, 8), torch.randn(8, 2)
with torch.autocast("npu"):  # the NPU default: float16
    out = m1 @ m2
assert out.dtype == torch.float16
torch.testing.assert_close(out.double(), m1.half().double() @ m2.half().double(),
                           rtol=2e-3, atol=2e-3)
with torch.autocast(device_type="npu", dtype=torch.bfloat16):
    assert (m1 @ m2).dtype == torch.bfloat16
with torch.npu.amp.autocast():
    assert (m1 @ m2).dtype == torch.float16
with torch.autocast("npu", enabled=False):
    assert (m1 @ m2).dtype == torch.float32
scaler = torch.amp.GradScaler("npu", init_scale=4.0)
w = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([w], lr=0.5)
scaler.scale((w * 2).sum()).backward()
assert torch.equal(w.grad, torch.full((2,), 8.0))  # scaled by 4
scaler.step(opt)  # unscales to 2, then steps
scaler.update()
assert torch.equal(w.detach(), torch.zeros(2))

# -- worker threads see npu devices too (per-rank threads, thread pools) --------------------------
import threading
from concurrent.futures import ThreadPoolExecutor


def on_worker(seed):
    t = torch.full((3,), float(seed)).npu()
    z = torch.zeros(2, device="npu:0")
    return t.is_npu, t.to("npu").is_npu, z.is_npu, float(torch_npu.npu_rms_norm(t, torch.ones(3))[0][0])


with ThreadPoolExecutor(2) as pool:
    answers = list(pool.map(on_worker, (1, 2)))
assert all(a[:3] == (True, True, True) for a in answers), answers
box = []
worker = threading.Thread(target=lambda: box.append(on_worker(3)))
worker.start()
worker.join()
assert box and box[0][:3] == (True, True, True), box

# -- feature detection of unimplemented ops ---------------------------------------------------
from npu_anywhere.compat.unimplemented import documented_ops

missing = [n for n, e in sorted(documented_ops().items())
           if e["api"] == "torch_npu" and not n.startswith("_") and not hasattr(torch_npu, n)]
if missing:
    assert not hasattr(torch.ops.npu, missing[0])
    try:
        getattr(torch_npu, missing[0])()
    except NotImplementedError as error:
        assert missing[0] in str(error) and "not implemented" in str(error), error
    else:
        raise AssertionError("no NotImplementedError")

print("GOLDEN INPLACE OK")
