"""A user's kernel checkpoint replaces only the FP32 model: say so when the shipped tensor-core model trained on a GPU
the user's checkpoint left out (a leave-T4-out checkpoint still priced T4 tensor-core kernels with a T4-trained
model, unsaid)."""
from __future__ import annotations

import json

from lilou.caveats import shipped_partner_notes
from lilou.checkpoints import checkpoint_path

NEUSIGHT = ["a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb"]


def _checkpoint(folder, trained_on):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"trained_on": trained_on}))
    return folder


def test_a_leave_t4_out_checkpoint_is_told_the_tensor_model_trained_on_the_t4(tmp_path):
    mine = _checkpoint(tmp_path / "no_t4", [g for g in NEUSIGHT if g != "t4"])
    assert shipped_partner_notes(mine, has_tensor=True) == [
        "kernel_checkpoint replaces only the FP32 kernel model: the tensor-core model (tensor-core and TF32 kernels) "
        "and the end-to-end overhead are the shipped ones, trained on t4, which your checkpoint left out"]
    assert shipped_partner_notes(mine, has_tensor=False) == []


def test_no_note_for_the_shipped_checkpoint_or_one_trained_on_every_gpu(tmp_path):
    assert shipped_partner_notes(checkpoint_path("kernel_latency"), has_tensor=True) == []
    assert shipped_partner_notes(_checkpoint(tmp_path / "all", NEUSIGHT), has_tensor=True) == []
