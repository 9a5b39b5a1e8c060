"""torch_npu.npu_normalize_batch: normalize (n, c, d) features with statistics of the first
``seq_len[i]`` frames of each batch item.

Formula (op-plugin's golden, ``test/test_v2r2_ops/test_normalize_batch.py``; kernel epsilon
1e-5 fixed in ``op_plugin/ops/aclops/NormalizeBatchKernelNpu.cpp``)::

    L = seq_len[i];  frames = self[i, :, :L]
    per_feature (0):  mean[i, c] = mean(frames[c]);   std[i, c] = std(frames[c])  (unbiased)
    all_features (1): mean[i]    = mean(frames);      std[i]    = std(frames)     (unbiased)
    out[i] = (self[i] - mean) / (std + 1e-5)          -- every frame, also those >= L
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

OP = "npu_normalize_batch"
SCHEMA = "npu_normalize_batch(Tensor self, Tensor seq_len, int normalize_type=0) -> Tensor"
EPSILON = 1e-5
NORMALIZE_TYPES = (0, 1)       # 0 "per_feature", 1 "all_features"


def check_normalize_batch(self, seq_len, normalize_type=0):
    op = OP
    allowed = (torch.float32,) if targets.current() is not None else (torch.float32,
                                                                      torch.float64)
    checks.expect_dtype(self, allowed, op, "self")
    checks.expect_dtype(seq_len, (torch.int32,), op, "seq_len")
    checks.expect_one_of(normalize_type, NORMALIZE_TYPES, op, "normalize_type")
    checks.expect_dim(self, 3, op, "self")
    checks.expect_dim(seq_len, 1, op, "seq_len")
    checks.expect(seq_len.shape[0] == self.shape[0], op, "seq_len",
                  lambda: f"one length per batch item ({self.shape[0]})",
                  lambda: f"shape {tuple(seq_len.shape)}")
    checks.expect_same_device({"self": self, "seq_len": seq_len}, op)


def normalize_batch_reference(self, seq_len, normalize_type=0):
    n, c, d = self.shape
    x = self
    lengths = seq_len.to(torch.int64).clamp(0, d)
    inside = (torch.arange(d, device=self.device)[None, :] < lengths[:, None])[:, None, :]
    dims = (2,) if normalize_type == 0 else (1, 2)
    # frames per statistic: L (per feature) or c * L (all features), as x's dtype
    count = lengths.to(x.dtype).reshape(n, 1, 1) * (1 if normalize_type == 0 else c)
    # where() rather than a 0/1 multiply: NaN/inf past seq_len must not reach the statistics
    mean = torch.where(inside, x, 0.0).sum(dims, keepdim=True) / count
    var = torch.where(inside, x - mean, 0.0).square().sum(dims, keepdim=True) / (count - 1)
    return (x - mean) / (var.sqrt() + EPSILON)


normalize_batch_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_normalize_batch,
                           reference=normalize_batch_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
normalize_batch_op.forbid_autograd("npu_normalize_batch has no backward in op-plugin's "
                                   "derivatives.yaml")


def npu_normalize_batch(self, seq_len, normalize_type=0):
    """Batch normalization of (n, c, d) features over the first ``seq_len[i]`` frames.

    Formula::

        frames = self[i, :, :seq_len[i]]
        normalize_type 0 ("per_feature"):  mean/std per (i, c) over the frames
        normalize_type 1 ("all_features"): mean/std per i over all c and the frames
        std is the unbiased (n - 1) standard deviation
        out[i] = (self[i] - mean) / (std + 1e-5)      applied to all d frames

    Parameters
    ----------
    self : Tensor
        (n, c, d) float32 (float64 also accepted outside strict mode).
    seq_len : Tensor
        (n,) int32: frames per batch item used for the statistics.
    normalize_type : int
        0 (per_feature, default) or 1 (all_features).

    Returns
    -------
    Tensor
        self's shape and dtype.  Frames at or past ``seq_len[i]`` are normalized with the same
        statistics (the seed's example output shows them), not zeroed.

    Notes
    -----
    The seed does not give the formula; it is settled by op-plugin's CPU golden
    (``test/test_v2r2_ops/test_normalize_batch.py``, identical in v1r11/v2r1/base):
    unbiased std, epsilon 1e-5 added to the std (not the variance), and the epsilon fixed by
    the wrapper (``op_plugin/ops/aclops/NormalizeBatchKernelNpu.cpp``).  ``seq_len`` values
    are clamped to [0, d]; a length of 1 gives NaN (unbiased std of one value) and 0 gives
    NaN, as the golden does.  No autograd.

    Examples
    --------
    >>> x = torch.rand(2, 3, 6) * 9 + 1
    >>> npu_anywhere.npu_normalize_batch(x, torch.tensor([4, 5], dtype=torch.int32), 0).shape
    torch.Size([2, 3, 6])
    """
    return normalize_batch_op(self, seq_len, normalize_type)


TORCH_NPU_FUNCTIONS = {"npu_normalize_batch": npu_normalize_batch}
