"""The documented training commands write only their run folder (audit ua42d, finding 1): the experiments set
``output_checkpoint: checkpoints/...``, so `python -m lilou.train experiment=kernel_latency ...` (and the README's sweep)
silently overwrote the shipped checkpoints."""
from __future__ import annotations

import re

import pytest

from lilou.errors import LilouInputError
from tests.conftest import REPO

SHIPPED_EXPERIMENTS = ["kernel_latency", "kernel_latency_tensor", "fusion_gnn"]


@pytest.mark.parametrize("experiment", SHIPPED_EXPERIMENTS)
def test_a_documented_experiment_replaces_no_shipped_checkpoint(experiment):
    from lilou.research.ablation import compose

    assert compose([f"experiment={experiment}"]).output_checkpoint is None


def test_the_eval_default_is_still_the_shipped_checkpoint_of_each_experiment():
    from lilou.eval import _checkpoint
    from lilou.research.ablation import compose

    for experiment in SHIPPED_EXPERIMENTS:
        assert _checkpoint(compose([f"experiment={experiment}"], config_name="eval")) == REPO / "checkpoints" / experiment


def test_the_make_targets_that_ship_name_the_checkpoint_they_replace():
    makefile = (REPO / "Makefile").read_text()

    def recipe(target):
        return re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)

    kernels, fusion = recipe("train-kernels"), recipe("train-fusion")
    assert "-m lilou.train experiment=kernel_latency output_checkpoint=checkpoints/kernel_latency\n" in kernels
    assert ("-m lilou.train experiment=kernel_latency_tensor output_checkpoint=checkpoints/kernel_latency_tensor\n"
            in kernels)
    assert "-m lilou.train experiment=fusion_gnn output_checkpoint=checkpoints/fusion_gnn\n" in fusion


def test_a_sweep_that_would_overwrite_a_shipped_folder_is_refused_before_training():
    from lilou.train import check_output_checkpoint

    with pytest.raises(LilouInputError, match=r"^output_checkpoint=checkpoints/fusion_gnn in a sweep \(-m\): every job "
                                              r"would overwrite .*checkpoints/fusion_gnn, the last one winning"):
        check_output_checkpoint("checkpoints/fusion_gnn", multirun=True)
    check_output_checkpoint("checkpoints/fusion_gnn", multirun=False)  # make train-fusion
    check_output_checkpoint(None, multirun=True)
    check_output_checkpoint("outputs/mine", multirun=True)
