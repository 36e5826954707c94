"""Leave-one-GPU-out folds over the five NeuSight training GPUs; beside the kernel model, whose data module accepts
a held-out name without rows when its fold partner has some.

One fold per GPU, holding out the GPU with its twins (the same die, ``lilou/hardware/dies.yaml``, the one source of
which boards are one chip) among the GPUs of the FP32 model's data. NeuSight measured conv on the A100 80GB instead
of the 40GB, so the A100 fold holds out both cards' kernel rows; the V100 fold also holds out the V100-SXM2's rows of
the kernel table (DeepBench's convolutions, for configs that train on them beside NeuSight's: ``data.table_rows``).
Shared by the kernel benchmark, the kernel ablation and ``lilou eval``.
"""
from __future__ import annotations

from lilou.hardware.dies import twins

#: The GPUs with rows in the FP32 kernel model's data: NeuSight's train and test splits, and the DeepBench V100.
FP32_DATA_GPUS = ("a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb", "v100-sxm2-16gb")
#: Fold name -> the fold's NeuSight training GPU.
_FOLD_GPUS = {"a100": "a100-pcie-40gb", "p100": "p100-pcie-16gb", "p4": "p4", "t4": "t4", "v100": "v100-pcie-32gb"}

#: Fold name -> GPUs whose kernel rows the fold holds out (the first is the fold's GPU, then its twins in the data).
KERNEL_FOLDS: dict[str, tuple[str, ...]] = {
    fold: tuple(g for g in twins(gpu) if g in FP32_DATA_GPUS) for fold, gpu in _FOLD_GPUS.items()}
