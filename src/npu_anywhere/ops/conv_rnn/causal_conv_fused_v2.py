"""torch_npu.npu_fused_causal_conv1d_v2: npu_fused_causal_conv1d writing its result into x.

op-plugin schema (op_plugin_functions.yaml): ``x`` and ``conv_states`` are both written and
nothing is returned.  Numerics, cache update and checks are those of
:mod:`.causal_conv_fused`; following op-plugin's golden (test/test_custom_ops/
test_npu_fused_causal_conv1d_v2.py, ``inplace=True``), the rows of a sequence skipped through
``pad_slot_id`` keep their input values.
"""

from __future__ import annotations

from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import causal_conv_fused as fused

OP = "npu_fused_causal_conv1d_v2"
SCHEMA = ("npu_fused_causal_conv1d_v2(Tensor(a!) x, Tensor weight, Tensor(b!) conv_states, "
          + fused.SCHEMA.split("Tensor(a!) conv_states, ", 1)[1].rsplit(" -> ", 1)[0]
          + " -> ()")


def check_fused_causal_conv1d_v2(x, weight, conv_states, **kwargs):
    fused.check_common(OP, x, weight, conv_states, **kwargs)


def fused_causal_conv1d_v2_reference(x, weight, conv_states, **kwargs):
    y, rows = fused.run(OP, x, weight, conv_states, **kwargs)
    for start, end in rows:
        if x.dim() == 2:
            x[start:end] = y[start:end]
        else:                       # [batch, m + 1, dim]: sequence b is x[b]
            b = start // x.shape[1]
            x[b] = y[b]


def _fake(x, weight, conv_states, **kwargs):
    return None


fused_causal_conv1d_v2_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_fused_causal_conv1d_v2,
                                  reference=fused_causal_conv1d_v2_reference, fake=_fake,
                                  metadata_check=True, info=OpInfo(api="torch_npu"))
fused_causal_conv1d_v2_op.forbid_autograd("an in-place inference op: op-plugin's derivatives.yaml "
                                          "has no backward for it")


def npu_fused_causal_conv1d_v2(x, weight, conv_states, *, query_start_loc=None,
                               cache_indices=None, initial_state_mode=None, bias=None,
                               num_accepted_tokens=None, activation="None", pad_slot_id=-1,
                               run_mode=0, residual_connection=0, max_query_len=-1,
                               num_computed_tokens=None, block_idx_first_scheduled_token=None,
                               block_idx_last_scheduled_token=None, initial_state_idx=None,
                               block_size=128, conv_mode="default"):
    """In-place :func:`npu_fused_causal_conv1d`: ``x`` receives ``y`` and ``conv_states`` is
    updated; returns None.

    Formula, parameters and constraints: those of ``npu_fused_causal_conv1d``.  Rows of
    sequences skipped through ``pad_slot_id`` are left as they were.
    """
    # Every argument is passed on by name, so this cannot drift from the forward's order.
    arguments = dict(locals())
    fused_causal_conv1d_v2_op(arguments.pop("x"), arguments.pop("weight"),
                              arguments.pop("conv_states"), **arguments)


TORCH_NPU_FUNCTIONS = {OP: npu_fused_causal_conv1d_v2}
