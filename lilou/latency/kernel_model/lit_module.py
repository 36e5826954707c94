"""Lightning module training :class:`KernelLatencyNet` on measured kernels.

Loss: the mean absolute percentage error (``loss: mape``, what the benchmark reports)
or L1 on log latency (``loss: log_l1``), plus ``type_weight`` x cross-entropy of the
kernel type.
"""
from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torch import nn

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.features import UNITS
from lilou.latency.kernel_model.model import KernelLatencyNet


LOSSES = ("mape", "log_l1")


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_hyperparameters(hidden, dropout, lr, weight_decay, type_weight) -> None:
    """A one-line input error for a setting the net cannot take (model.lr=abc, model.hidden=abc were TypeError
    tracebacks from torch, exit status 1; model.hidden=abc would have been three layers named by its letters)."""
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or not hidden or \
            not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden):
        raise LilouInputError(f"model.hidden={hidden}: give a list of positive layer widths, e.g. [256,256,128]")
    if not _real(dropout) or not 0 <= dropout < 1:
        raise LilouInputError(f"model.dropout={dropout}: give a probability in [0, 1)")
    if not _real(lr) or not lr > 0:
        raise LilouInputError(f"model.lr={lr}: give a positive learning rate")
    for name, value in (("weight_decay", weight_decay), ("type_weight", type_weight)):
        if not _real(value) or not value >= 0:
            raise LilouInputError(f"model.{name}={value}: give a number >= 0")


class KernelLatencyModule(L.LightningModule):
    def __init__(self, num_features: int, num_type_features: int, hidden: Sequence[int] = (256, 256, 128), dropout: float = 0.0,
                 lr: float = 3e-3, weight_decay: float = 1e-4, type_weight: float = 0.1,
                 loss: str = "mape", power_limited: bool = False, power_duration: bool = False,
                 num_timings: int = 1, floor_per_unit: bool = False, floor_start_quantile: float | None = None) -> None:
        if loss not in LOSSES:  # anything but "mape" trained with log_l1 and said nothing
            raise LilouInputError(f"model.loss={loss}: unknown loss; known: {', '.join(LOSSES)}")
        check_hyperparameters(hidden, dropout, lr, weight_decay, type_weight)
        super().__init__()
        self.save_hyperparameters()
        self.net = KernelLatencyNet(num_features, num_type_features, hidden=tuple(hidden), dropout=dropout,
                                    power_limited=power_limited, power_duration=power_duration,
                                    num_timings=num_timings, floor_units=len(UNITS) if floor_per_unit else 1)

    def on_fit_start(self) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and datamodule.train is not None:
            train = datamodule.train
            self.net.set_normalisation(train.features, train.type_features)
            if self.hparams.floor_start_quantile is not None:
                self.net.start_floors_at(train.log_latency, self.hparams.floor_start_quantile, train.family,
                                         train.timing if self.hparams.num_timings > 1 else None, train.unit)

    def forward(self, features, type_features, family, roofline, timing=None, unit=None):
        return self.net(features, type_features, family, roofline, timing, unit)

    def _step(self, batch, stage: str) -> torch.Tensor:
        features, type_features, family, roofline, log_latency, kernel_type, timing, unit = batch
        log_pred, type_logits = self(features, type_features, family, roofline,
                                     timing if self.hparams.num_timings > 1 else None, unit)
        relative_error = ((log_pred - log_latency).exp() - 1).abs()
        latency_loss = relative_error.mean() if self.hparams.loss == "mape" else (log_pred - log_latency).abs().mean()
        labelled = kernel_type >= 0  # rows without a kernel name (most sources) train the latency only
        type_loss = (nn.functional.cross_entropy(type_logits[labelled], kernel_type[labelled]) if labelled.any()
                     else type_logits.sum() * 0.0)
        loss = latency_loss + self.hparams.type_weight * type_loss
        ape = relative_error.mean()
        accuracy = ((type_logits.argmax(dim=1) == kernel_type)[labelled].float().mean() if labelled.any()
                    else torch.tensor(float("nan")))
        self.log_dict({f"{stage}/loss": loss, f"{stage}/mape": ape, f"{stage}/type_acc": accuracy},
                      prog_bar=stage != "train", on_epoch=True, on_step=False, batch_size=len(features))
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        total = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=int(total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
