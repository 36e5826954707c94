"""Lightning data module over the fusion dataset: family-split PyG loaders, one item per (graph, backend)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lightning as L
from hydra.utils import to_absolute_path
from torch_geometric.loader import DataLoader

from lilou.errors import LilouInputError, MissingDataError
from lilou.fusion.backends import BACKENDS, check_backend
from lilou.fusion.dataset import SPLITS, FusionSample, check_split, load_split, to_training_items


class FusionDataModule(L.LightningDataModule):
    """``train_splits``: the splits the model learns from. The held-out protocol (``make bench-fusion``) trains on
    ``train`` alone and scores the held-out splits; the shipped model learns from every split but ``val`` (the
    held-out families, ops and exporter settings are what users export too), so its scores on them are not
    held out."""

    def __init__(self, root: str = "datasets/fusion", backends: Sequence[str] = ("eager", "tvm"),
                 batch_size: int = 16, exporters: Sequence[str] | None = None,
                 train_splits: Sequence[str] = ("train",)) -> None:
        super().__init__()
        self.root = Path(to_absolute_path(root)) if not Path(root).is_absolute() else Path(root)
        self.backends = tuple(backends)
        self.batch_size = batch_size
        self.exporters = tuple(exporters) if exporters else None
        self.train_splits = tuple(train_splits)
        self.samples: dict[str, list[FusionSample]] = {}
        self.check_names()

    def check_names(self) -> None:
        """Refuse an unknown split or backend name up front: one selected no graph, silently (``[train,bogus]``
        dropped ``bogus``) or blamed on missing data ("build them with make fusion-data")."""
        try:
            self.backends = tuple(check_backend(b) for b in self.backends)
        except LilouInputError as exc:
            raise LilouInputError(f"data.backends: {exc}") from None
        if not self.backends:
            raise LilouInputError(f"data.backends is empty; choose from: {', '.join(BACKENDS)}")
        for split in self.train_splits:
            check_split(split, "data.train_splits")
        if not self.train_splits:
            raise LilouInputError(f"data.train_splits is empty; choose from: {', '.join(SPLITS)}")

    def _load(self, split: str) -> list[FusionSample]:
        samples = load_split(self.root, split, self.backends)
        if self.exporters:
            samples = [s for s in samples if s.exporter in self.exporters]
        return samples

    def setup(self, stage: str | None = None) -> None:
        if self.samples:
            return
        self.check_names()  # again: the attributes may have been set after construction
        for split in ("val", "test"):
            self.samples[split] = self._load(split)
        self.samples["train"] = [sample for split in self.train_splits for sample in self._load(split)]
        if not self.samples["train"]:
            raise MissingDataError(f"no labelled fusion graphs under {self.root}; build them with `make fusion-data`")

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        items = to_training_items(self.samples[split], self.backends)
        return DataLoader(items, batch_size=self.batch_size, shuffle=shuffle)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)
