"""Lightning data module: NeuSight kernel rows as feature tensors, split by GPU."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from lilou.data.neusight import load_kernels
from lilou.errors import LilouInputError
from lilou.latency.kernel_model.dataset import KernelDataset, build_dataset, concat_datasets, dataset_from_sample
from lilou.latency.kernel_model.features import FEATURE_GROUPS, floor_units_of, kernel_features, roofline_inputs
from lilou.latency.kernel_model.table_sample import sample_table


@dataclass(frozen=True)
class KernelTensors:
    """What the network consumes, one row per measured kernel."""

    features: torch.Tensor      # float32 [n, d]: latency features
    type_features: torch.Tensor  # float32 [n, d_type]: kernel-type features
    family: torch.Tensor        # int64 [n]
    roofline: torch.Tensor      # float32 [n, 3]: features.roofline_inputs
    log_latency: torch.Tensor   # float32 [n], natural log of ms
    kernel_type: torch.Tensor   # int64 [n]; -1 where the row has no kernel name
    timing: torch.Tensor        # int64 [n]: index of the timing method (lilou.latency.kernel_model.dataset.TIMINGS)
    unit: torch.Tensor          # int64 [n]: the compute unit whose launch floor the row takes (features.UNITS)

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.features, self.type_features, self.family, self.roofline, self.log_latency,
                             self.kernel_type, self.timing, self.unit)


def to_tensors(data: KernelDataset, feature_groups: Sequence[str] = FEATURE_GROUPS,
               type_feature_groups: Sequence[str] = FEATURE_GROUPS, winograd_roofline: bool = False) -> KernelTensors:
    return KernelTensors(
        features=torch.from_numpy(kernel_features(data.kernels, data.devices, feature_groups)),
        type_features=torch.from_numpy(kernel_features(data.kernels, data.devices, type_feature_groups)),
        family=torch.from_numpy(data.kernels.family),
        roofline=torch.from_numpy(roofline_inputs(data.kernels, data.devices, winograd_roofline)),
        log_latency=torch.from_numpy(np.log(data.latency_ms).astype(np.float32)),
        kernel_type=torch.from_numpy(data.kernel_type),
        timing=torch.from_numpy(data.timing),
        unit=torch.from_numpy(floor_units_of(data.devices, len(data.latency_ms))),
    )


def table_dataset(selection: Mapping[str, Sequence[str]], data_dir: str | None = None) -> KernelDataset:
    """Every forward-pass row of the kernel table with ``selection``'s sources, dtypes and families (each
    optional; table family names: gemm, bmm, conv, elementwise, norm, softmax) that the model prices."""
    from lilou.data.kernel_table import kernel_table

    unknown = set(selection) - {"sources", "dtypes", "families"}
    if unknown:
        raise ValueError(f"table_rows takes sources, dtypes and families, not {sorted(unknown)}")
    relation = kernel_table(selection.get("sources"), data_dir)
    for column, key in (("dtype", "dtypes"), ("family", "families")):
        if selection.get(key):
            relation = relation.filter(f"{column} IN ({', '.join(repr(str(v)) for v in selection[key])})")
    return dataset_from_sample(sample_table(relation, per_group=2**31 - 1))


def checked_groups(groups: str | Sequence[str], setting: str) -> tuple[str, ...]:
    """Feature groups, each one of ``features.FEATURE_GROUPS``: an unknown one was ignored yet recorded in the
    checkpoint as used (a typo in an ablation reproduced the baseline); none at all ended in numpy's 'need at least
    one array to stack'."""
    names = names_setting(groups)
    unknown = [g for g in names if g not in FEATURE_GROUPS]
    if unknown or not names:
        raise LilouInputError(f"{setting}: unknown feature group(s) {', '.join(unknown) or '(none given)'}; "
                              f"known: {', '.join(FEATURE_GROUPS)}")
    return names


def names_setting(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A list setting of names; a single string is one name (``tuple("t4")`` was ``('t', '4')``)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def resolve_held_out_gpus(names: Sequence[str], present: Sequence[str], setting: str = "data.held_out_gpus",
                          what: str = "NeuSight's training split") -> tuple[str, ...]:
    """The data's GPU names for ``names``: exact names, then the GPU database's aliases and case (``T4``, ``v100``)
    where exactly one GPU of the data answers. A name that matches no row of the data (a typo, a GPU the data does
    not have, one with no rows among the chosen ops) is refused, as it held out nothing and trained on the GPU meant
    to be held out; so is one that could mean several of the data's GPUs. A name of a leave-one-GPU-out fold
    (``lilou.latency.kernel_model.folds``) may have no rows when its fold partner, held out beside it, has some."""
    from lilou.errors import LilouInputError
    from lilou.hardware.database import find_gpu, name_family
    from lilou.latency.kernel_model.folds import KERNEL_FOLDS

    present_set = set(present)
    known = ", ".join(sorted(present_set)) or "none"
    resolved: list[str] = []
    absent: dict[str, str] = {}  # database name -> how the user wrote it
    for name in names:
        if name in present_set:
            resolved.append(name)
            continue
        try:
            gpu = find_gpu(name)
        except LilouInputError:
            raise LilouInputError(f"{setting}: unknown GPU '{name}'; GPUs in {what}: {known}") from None
        candidates = [g for g in dict.fromkeys([gpu.name, *name_family(name)]) if g in present_set]
        if len(candidates) > 1:
            raise LilouInputError(f"{setting}: GPU name '{name}' could mean {', '.join(candidates)}; "
                                  f"give the full name(s); GPUs in {what}: {known}")
        resolved.append(candidates[0] if candidates else gpu.name)
        if not candidates:
            absent[gpu.name] = name if name == gpu.name else f"{name} ({gpu.name})"
    held_with_rows = set(resolved) & present_set
    partnered = {gpu for fold in KERNEL_FOLDS.values() if held_with_rows & set(fold) for gpu in fold}
    refused = [gpu for gpu in absent if gpu not in partnered]
    if refused:
        partners = [g for fold in KERNEL_FOLDS.values() if refused[0] in fold for g in fold if g in present_set]
        hint = f" (its fold partner {', '.join(partners)} has rows: hold out both)" if partners else ""
        raise LilouInputError(f"{setting}: {', '.join(absent[g] for g in refused)} has no rows in {what}, so nothing "
                              f"would be held out{hint}; GPUs in {what}: {known}")
    return tuple(dict.fromkeys(resolved))


class KernelDataModule(L.LightningDataModule):
    """Train on the NeuSight train split minus ``held_out_gpus``; test on those GPUs.

    A random ``val_fraction`` of the training GPUs' rows is kept for validation.
    ``max_rows`` subsamples the training rows (tests and quick runs).
    ``table_rows`` adds rows of the kernel table beside NeuSight's, chosen by ``sources``, ``dtypes`` and
    ``families`` (e.g. DeepBench's FP32 convolutions: NeuSight measured only 3x3, stride-1 ones, which cuDNN
    may run as Winograd, so a model trained on them alone prices a 1x1 convolution at a Winograd 3x3 one's rate
    per FLOP). Each row keeps its timing method; the held-out GPUs are held out of them too.
    """

    def __init__(self, data_dir: str | None = None, held_out_gpus: Sequence[str] = (),
                 feature_groups: Sequence[str] = FEATURE_GROUPS,
                 type_feature_groups: Sequence[str] = FEATURE_GROUPS, ops: Sequence[str] | None = None,
                 val_fraction: float = 0.05, max_rows: int | None = None, batch_size: int = 1024,
                 seed: int = 0, winograd_roofline: bool = False,
                 table_rows: Mapping[str, Sequence[str]] | None = None) -> None:
        super().__init__()
        self.winograd_roofline = winograd_roofline
        self.table_rows = {key: tuple(values) for key, values in (table_rows or {}).items()}
        self.data_dir = data_dir
        self.held_out_gpus = names_setting(held_out_gpus)
        self.feature_groups = checked_groups(feature_groups, "data.feature_groups")
        self.type_feature_groups = checked_groups(type_feature_groups, "data.type_feature_groups")
        self.ops = names_setting(ops) or None  # data.ops=linear: one op, not six letters
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
            raise LilouInputError(f"data.max_rows={max_rows}: give a positive number of training rows, or null for all")
        if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 <= val_fraction < 1:
            raise LilouInputError(f"data.val_fraction={val_fraction}: give a fraction of the training rows in [0, 1)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise LilouInputError(f"data.batch_size={batch_size}: give a positive number of rows per batch")
        self.val_fraction = val_fraction
        self.max_rows = max_rows
        self.batch_size = batch_size
        self.seed = seed
        self.train: KernelTensors | None = None
        self.val: KernelTensors | None = None
        self.test: KernelTensors | None = None
        self.test_rows: KernelDataset | None = None
        self.val_rows: KernelDataset | None = None
        self.train_rows: KernelDataset | None = None
        self.train_gpus: tuple[str, ...] = ()
        self.preloaded: KernelDataset | None = None  # rows a caller already loaded (benchmark folds)

    def load_dataset(self) -> KernelDataset:
        """Every row the module splits (subclasses read other data)."""
        neusight = build_dataset(load_kernels("train", ops=self.ops, data_dir=self.data_dir))
        if not self.table_rows:
            return neusight
        return concat_datasets([neusight, table_dataset(self.table_rows, self.data_dir)])

    def data_description(self) -> str:
        """What the rows are, for error messages."""
        what = "NeuSight's training split"
        if self.ops:
            what += f" (ops {', '.join(self.ops)})"
        return what + (" and the kernel-table rows" if self.table_rows else "")

    def held_out_mask(self, data: KernelDataset) -> np.ndarray:
        """Rows of the test set: those of the held-out GPUs (their names resolved against the data's)."""
        self.held_out_gpus = resolve_held_out_gpus(self.held_out_gpus, np.unique(data.gpu).tolist(),
                                                   what=self.data_description())
        return np.isin(data.gpu, self.held_out_gpus)

    def setup(self, stage: str | None = None) -> None:
        if self.train is not None:
            return
        data = self.preloaded if self.preloaded is not None else self.load_dataset()
        held_out = self.held_out_mask(data)
        rng = np.random.default_rng(self.seed)
        train_rows = np.flatnonzero(~held_out)
        if not len(train_rows):
            raise LilouInputError(f"the held-out set ({', '.join(self.held_out_gpus)}) leaves no training rows; "
                                  f"GPUs in the data: {', '.join(np.unique(data.gpu).tolist())}")
        if self.max_rows is not None and len(train_rows) > self.max_rows:
            train_rows = np.sort(rng.choice(train_rows, self.max_rows, replace=False))
        rng.shuffle(train_rows)
        n_val = int(len(train_rows) * self.val_fraction)
        self.train_rows = data.take(np.sort(train_rows[n_val:]))
        self.train_gpus = tuple(np.unique(self.train_rows.gpu))
        groups = (self.feature_groups, self.type_feature_groups, self.winograd_roofline)
        self.train = to_tensors(self.train_rows, *groups)
        self.val_rows = data.take(np.sort(train_rows[:n_val]))
        self.val = to_tensors(self.val_rows, *groups)
        self.test_rows = data.take(np.flatnonzero(held_out))
        self.test = to_tensors(self.test_rows, *groups)

    def _loader(self, tensors: KernelTensors, shuffle: bool) -> DataLoader:
        """Whole batches sliced at once: per-row fetching and collation would dominate."""
        generator = torch.Generator().manual_seed(self.seed)
        base = RandomSampler(tensors.dataset(), generator=generator) if shuffle else SequentialSampler(tensors.dataset())
        batches = BatchSampler(base, batch_size=self.batch_size, drop_last=False)
        return DataLoader(tensors.dataset(), sampler=batches, batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test, shuffle=False)
