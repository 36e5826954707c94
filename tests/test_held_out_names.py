"""Held-out GPU and architecture names are resolved against the data, or refused: a name that matched no row held
out nothing and trained on the GPU meant to be held out (exit 0, ``"held_out": []``)."""
from __future__ import annotations

import numpy as np
import pytest

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.datamodule import KernelDataModule, names_setting, resolve_held_out_gpus
from lilou.latency.kernel_model.table_datamodule import resolve_architectures

NEUSIGHT = ["a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb"]


def test_a_single_string_is_one_name_not_its_characters():
    assert names_setting("t4") == ("t4",)
    assert names_setting(["t4", "p4"]) == ("t4", "p4")
    assert names_setting(None) == ()


@pytest.mark.parametrize("name, expected", [("t4", "t4"), ("T4", "t4"), ("Tesla T4", "t4"),
                                            ("v100", "v100-pcie-32gb"), ("P100-PCIE-16GB", "p100-pcie-16gb")])
def test_aliases_and_case_resolve_to_the_datas_name(name, expected):
    assert resolve_held_out_gpus([name], NEUSIGHT) == (expected,)


def test_a_typo_is_refused_with_the_setting_and_the_known_names():
    with pytest.raises(LilouInputError) as error:
        resolve_held_out_gpus(["t4x"], NEUSIGHT)
    assert str(error.value) == ("data.held_out_gpus: unknown GPU 't4x'; GPUs in NeuSight's training split: "
                                "a100-pcie-40gb, a100-pcie-80gb, p100-pcie-16gb, p4, t4, v100-pcie-32gb")


def test_a_database_gpu_without_rows_is_refused():
    with pytest.raises(LilouInputError, match=r"^data.held_out_gpus: h100-sxm \(h100-sxm5-80gb\) has no rows|"
                                              r"^data.held_out_gpus: h100-sxm has no rows"):
        resolve_held_out_gpus(["h100-sxm"], NEUSIGHT)


def test_an_alias_meaning_two_of_the_datas_gpus_is_refused():
    with pytest.raises(LilouInputError, match="GPU name 'a100' could mean a100-pcie-40gb, a100-pcie-80gb"):
        resolve_held_out_gpus(["a100"], NEUSIGHT)


def test_a_fold_partner_without_rows_is_accepted_beside_one_with_rows():
    """The V100 fold holds out the SXM2 card too, which only the kernel table has."""
    assert resolve_held_out_gpus(["v100-pcie-32gb", "v100-sxm2-16gb"], NEUSIGHT) == ("v100-pcie-32gb",
                                                                                      "v100-sxm2-16gb")
    without_a100_40 = [g for g in NEUSIGHT if g != "a100-pcie-40gb"]  # NeuSight's conv rows
    with pytest.raises(LilouInputError, match="a100-pcie-40gb has no rows .*its fold partner a100-pcie-80gb"):
        resolve_held_out_gpus(["a100-pcie-40gb"], without_a100_40)


def test_conv_on_the_a100_40gb_is_refused_by_the_data_module(datasets_dir):
    """NeuSight measured conv on the 80GB card: holding out the 40GB one tested nothing and trained on its twin."""
    module = KernelDataModule(data_dir=str(datasets_dir), held_out_gpus=["a100-pcie-40gb"], ops=["conv"])
    with pytest.raises(LilouInputError, match=r"^data.held_out_gpus: a100-pcie-40gb has no rows in NeuSight's "
                                              r"training split \(ops conv\)"):
        module.setup()


def test_a_scalar_held_out_gpu_holds_it_out(datasets_dir):
    module = KernelDataModule(data_dir=str(datasets_dir), held_out_gpus="T4", ops=["softmax"], max_rows=200)
    module.setup()
    assert module.held_out_gpus == ("t4",)
    assert "t4" not in module.train_gpus
    assert np.unique(module.test_rows.gpu).tolist() == ["t4"]


def test_holding_out_every_gpu_is_refused(datasets_dir):
    module = KernelDataModule(data_dir=str(datasets_dir), held_out_gpus=NEUSIGHT, ops=["softmax"])
    with pytest.raises(LilouInputError, match="leaves no training rows"):
        module.setup()


@pytest.mark.parametrize("name, expected", [("Hopper", "Hopper"), ("hopper", "Hopper"), ("ga100", "GA100"),
                                            ("Ada Lovelace", "Ada")])
def test_architecture_classes_ignore_case(name, expected):
    assert resolve_architectures((name,), {"Hopper", "GA100", "Ada", "Turing"}) == (expected,)


def test_ampere_and_absent_classes_are_refused():
    with pytest.raises(LilouInputError, match=r"unknown architecture class 'Ampere' \(Ampere is split: GA100 or GA10x\)"):
        resolve_architectures(("Ampere",), {"GA100"})
    with pytest.raises(LilouInputError, match="^data.held_out_architectures: Maxwell has no rows in the kernel table"):
        resolve_architectures(("maxwell",), {"GA100", "Hopper"})
