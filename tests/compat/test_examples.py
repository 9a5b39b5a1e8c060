"""The documentation's calling examples, run unmodified through ``npu-anywhere run``.

Each script in ``examples/`` is a doc example copied as literally as the seed text allows
(``import torch_npu``, ``.npu()``, ``device="npu"``, ``torch_npu.npu.set_device(0)`` kept), with
a marked block appended that checks the numbers against the documented formula in float64 and
prints ``EXAMPLE OK``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent / "examples"

CASES = {
    # seed 000 (cann_ops_transformer.apply_rotary_pos_emb), section 9.1 单算子模式调用
    "cann_apply_rotary_pos_emb_single_op": "cann_apply_rotary_pos_emb_single_op.py",
    # seed 000, section 9.2 Ascend 950 训练模式调用（自动微分）
    "cann_apply_rotary_pos_emb_autograd_950": "cann_apply_rotary_pos_emb_autograd_950.py",
    # seed 004, torch_npu.npu_rotary_mul 示例1 / 示例2 / 示例3
    "npu_rotary_mul_example1": "npu_rotary_mul_example1.py",
    "npu_rotary_mul_example2": "npu_rotary_mul_example2.py",
    "npu_rotary_mul_example3": "npu_rotary_mul_example3.py",
    # seed 004, torch_npu.npu_apply_rotary_pos_emb 调用示例
    "npu_apply_rotary_pos_emb_example": "npu_apply_rotary_pos_emb_example.py",
}


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CASES.values())


@pytest.mark.parametrize("script", list(CASES.values()), ids=list(CASES))
def test_doc_example_runs_and_matches_formula(cli, script):
    path = EXAMPLES / script
    text = path.read_text("utf-8")
    assert "# --- added by npu_anywhere tests: check the numbers ---" in text
    assert "import torch_npu" in text
    proc = cli("run", str(path))
    assert proc.returncode == 0, cli.describe(proc)
    assert "EXAMPLE OK" in proc.stdout, cli.describe(proc)
