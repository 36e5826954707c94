"""Lightning data module over the whole kernel-measurement table, split by GPU or architecture.

Every source trains the same GPU-work model: each row carries its timing method (the model learns
a launch floor per method) and the unit whose peak bounds its math (the roofline uses that peak).
A fixed hash sample keeps at most ``per_group`` rows of each (source, GPU, dtype, family), so the
7.5 M AIConfigurator rows do not drown the other sources.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.datamodule import KernelDataModule, names_setting, resolve_held_out_gpus
from lilou.latency.kernel_model.dataset import KernelDataset, dataset_from_sample
from lilou.latency.kernel_model.features import FEATURE_GROUPS
from lilou.hardware.database import ARCHITECTURE_CLASSES, architecture_class
from lilou.latency.kernel_model.table_sample import checked_per_group, sample_table


class KernelTableDataModule(KernelDataModule):
    """Train on the kernel table minus ``held_out_gpus`` and ``held_out_architectures``; test on those."""

    def __init__(self, data_dir: str | None = None, held_out_gpus: Sequence[str] = (),
                 held_out_architectures: Sequence[str] = (), sources: Sequence[str] | None = None,
                 per_group: int = 4000, feature_groups: Sequence[str] = FEATURE_GROUPS,
                 type_feature_groups: Sequence[str] = FEATURE_GROUPS, val_fraction: float = 0.05,
                 max_rows: int | None = None, batch_size: int = 1024, seed: int = 0,
                 winograd_roofline: bool = False) -> None:
        super().__init__(data_dir=data_dir, held_out_gpus=held_out_gpus, feature_groups=feature_groups,
                         type_feature_groups=type_feature_groups, val_fraction=val_fraction, max_rows=max_rows,
                         batch_size=batch_size, seed=seed, winograd_roofline=winograd_roofline)
        self.held_out_architectures = names_setting(held_out_architectures)
        self.sources = names_setting(sources) or None  # data.sources=vidur, not [vidur]: one source, not five letters
        self.per_group = checked_per_group(per_group, "data.per_group")

    def load_dataset(self) -> KernelDataset:
        from lilou.data.kernel_table import kernel_table

        return dataset_from_sample(sample_table(kernel_table(self.sources, self.data_dir), self.per_group))

    def data_description(self) -> str:
        return "the kernel table" + (f" (sources {', '.join(self.sources)})" if self.sources else "")

    def held_out_mask(self, data: KernelDataset) -> np.ndarray:
        present = np.unique(data.gpu).tolist()
        what = self.data_description()
        self.held_out_gpus = resolve_held_out_gpus(self.held_out_gpus, present, what=what)
        architectures = {gpu: architecture_class(gpu) for gpu in present}
        self.held_out_architectures = resolve_architectures(self.held_out_architectures, set(architectures.values()),
                                                            what)
        by_architecture = np.array([architectures[g] in self.held_out_architectures for g in data.gpu], dtype=bool)
        return np.isin(data.gpu, self.held_out_gpus) | by_architecture


def resolve_architectures(names: tuple[str, ...], present: set[str], what: str = "the kernel table",
                          setting: str = "data.held_out_architectures") -> tuple[str, ...]:
    """The architecture classes (``lilou.hardware.database.ARCHITECTURE_CLASSES``) for ``names``, ignoring case
    (``hopper`` is Hopper, ``Ada Lovelace`` is Ada); a name that is no class (``Ampere``: GA100 or GA10x) or whose
    class has no rows in the data is refused: it held out nothing and trained on the architecture meant to be held
    out."""
    classes = {c.lower(): c for c in ARCHITECTURE_CLASSES}
    in_data = ", ".join(c for c in ARCHITECTURE_CLASSES if c in present)
    resolved = []
    for name in names:
        key = name.strip().lower()
        found = classes.get(key) or classes.get(key.split()[0] if key else key)
        if found is None:
            hint = " (Ampere is split: GA100 or GA10x)" if key == "ampere" else ""
            raise LilouInputError(f"{setting}: unknown architecture class '{name}'{hint}; known: "
                                  f"{', '.join(ARCHITECTURE_CLASSES)}; in {what}: {in_data}")
        if found not in present:
            raise LilouInputError(f"{setting}: {found} has no rows in {what}, so nothing would be held out; "
                                  f"architecture classes in {what}: {in_data}")
        resolved.append(found)
    return tuple(dict.fromkeys(resolved))
