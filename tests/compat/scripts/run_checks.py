"""Run by test_shim.py as ``npu-anywhere run [--claim-npu] run_checks.py MODE ARGS...``.

MODE is ``default`` (expects ``torch.npu.is_available()`` False) or ``claim`` (expects True);
the remaining arguments are echoed so that the test can check sys.argv.  Prints one JSON line
prefixed ``RESULT `` and finally ``RUN CHECKS OK``.
"""

import json
import sys

import torch
import torch_npu  # the shim, installed by `npu-anywhere run`

assert __name__ == "__main__", __name__
mode = sys.argv[1]
result = {"argv": sys.argv, "is_available": torch.npu.is_available(),
          "torch_npu_is_shim": bool(getattr(torch_npu, "__npu_anywhere_shim__", False))}
assert result["is_available"] is (mode == "claim"), result
assert torch_npu.npu is torch.npu

# device="npu" / "npu:0" / torch.device("npu", 0) mean the local device (cpu here).
devices = {
    'randn(device="npu")': torch.randn(2, device="npu").device,
    'zeros(device="npu:0")': torch.zeros(2, device="npu:0").device,
    'empty(device=torch.device("npu", 0))': torch.empty(2, device=torch.device("npu", 0)).device,
    'ones(2).npu()': torch.ones(2).npu().device,
    'ones(2).npu(0)': torch.ones(2).npu(0).device,
    'ones(2).to("npu")': torch.ones(2).to("npu").device,
    'ones(2).to("npu:0")': torch.ones(2).to("npu:0").device,
    'ones(2).to(torch.device("npu"))': torch.ones(2).to(torch.device("npu")).device,
    'ones(2).to("npu", torch.float16)': torch.ones(2).to("npu", torch.float16).device,
    'ones(2).to(device="npu")': torch.ones(2).to(device="npu").device,
}
result["devices"] = {k: str(v) for k, v in devices.items()}
assert torch.ones(2).to("npu", torch.float16).dtype == torch.float16
assert torch.ones(2).npu().sum().item() == 2.0

# An op called through torch_npu on npu tensors, against the documented formula (half mode).
x = torch.rand(2, 2, 5, 8, device="npu")
r1 = torch.rand(1, 2, 1, 8).npu()
r2 = torch.rand(1, 2, 1, 8).to("npu")
x1, x2 = torch.chunk(x.double(), 2, -1)
expected = r1.double() * x.double() + r2.double() * torch.cat((-x2, x1), dim=-1)
torch.testing.assert_close(torch_npu.npu_rotary_mul(x, r1, r2).double(), expected)

print("RESULT " + json.dumps(result))
print("RUN CHECKS OK")
