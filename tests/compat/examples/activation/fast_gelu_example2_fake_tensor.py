# Seed 004, torch_npu.fast_gelu, 示例二 (FakeTensor模式), turned from doctest lines into a
# script: the `>>> ` / `... ` prompts were dropped, the block indentation restored and the
# imports the doctest assumes were added.
import torch
import torch_npu

from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    x = torch.rand(2).npu()
    y = torch_npu.fast_gelu(x)
    print(y)

# --- added by npu_anywhere tests: check the numbers ---
# The doc shows FakeTensor(..., device='npu:0', size=(2,)): a fake result of x's shape and dtype.
from torch._subclasses.fake_tensor import FakeTensor
assert isinstance(y, FakeTensor), type(y)
assert y.shape == (2,) and y.dtype == torch.float32, (y.shape, y.dtype)
print("EXAMPLE OK")
