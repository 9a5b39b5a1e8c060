"""A decoder-style block made of torch_npu ops, and its float64 golden from the doc formulas
(seed 004: RmsNorm ``x / sqrt(mean(x^2) + eps) * gamma``; RotaryMul half mode
``x * r1 + rotate_half(x) * r2``; SwiGLU ``A * sigmoid(A) * B`` over the last dim)."""

import torch
import torch_npu


class NpuBlock(torch.nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.up = torch.nn.Linear(hidden, 2 * inter, bias=False)
        self.down = torch.nn.Linear(inter, hidden, bias=False)

    def forward(self, x, r1, r2):
        h, _ = torch_npu.npu_rms_norm(x, self.gamma, epsilon=1e-6)
        h = torch_npu.npu_rotary_mul(h, r1, r2)
        return x + self.down(torch_npu.npu_swiglu(self.up(h), dim=-1))


def rotate_half(t):
    a, b = t.chunk(2, -1)
    return torch.cat((-b, a), -1)


def golden_block(block: NpuBlock, x, r1, r2):
    """The same block in float64, from the formulas only."""
    x, r1, r2 = x.double(), r1.double(), r2.double()
    gamma = block.gamma.double()
    h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    h = h * r1 + rotate_half(h) * r2
    a, b = (h @ block.up.weight.double().t()).chunk(2, -1)
    return x + (a * torch.sigmoid(a) * b) @ block.down.weight.double().t()
