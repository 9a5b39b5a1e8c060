"""A small CUDA-style model: written for GPUs, run on the npu stand-in via transfer_to_npu."""

import torch


class TinyMLP(torch.nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, width)
        self.fc2 = torch.nn.Linear(width, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make_batch(n: int, device: str):
    g = torch.Generator(device=device).manual_seed(5)
    x = torch.randn(n, 4, generator=g, device=device)
    return x, x.sum(-1, keepdim=True)
