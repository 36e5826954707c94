"""LightningModule for the fusion GNN: binary cross-entropy on runtime edges.

With ``keep_best`` the weights of the epoch with the lowest loss on the validation
families are restored when training ends (early stopping without cutting the
learning-rate schedule short). The shipped config keeps the last epoch instead:
see docs/fusion.md for why.

With ``prior_dropout`` p, each training graph of a backend in ``prior_dropout_backends``
(all when unset) has its replay-prior edge columns zeroed with probability p (zero is the
replays' "not fused" verdict). The eager replay knows a fixed list of decompositions, and a
GNN that always sees it learns to copy it; on the graphs without it, the model must find a
multi-node aten op from structure and from the exporter's names
(:mod:`lilou.fusion.export_names`), which is what an activation no replay rule knows needs.
The shipped recipe hides eager's replay only: TVM's replay is FuseOps itself, not a list of
patterns, and hiding it only costs.

With ``name_dropout`` p, each training graph has its exporter-name column zeroed with
probability p: every graph with eager labels comes from the dynamo exporter, and a model
that always sees its names may group a file whose names say nothing (another exporter,
renamed nodes) worse. An option for ablations; the shipped recipe does not use it.
"""
from __future__ import annotations

import lightning as L
import torch
from torch.nn import functional as F

from lilou.fusion.backends import BACKENDS
from lilou.fusion.features import EXPORT_NAME_COLUMN, FUSION_EDGE_FEATURES, FUSION_NODE_FEATURES, PRIOR_COLUMNS
from lilou.fusion.gnn import FusionGNN


class FusionModule(L.LightningModule):
    def __init__(self, hidden: int = 64, layers: int = 4, conv: str = "gine", dropout: float = 0.0,
                 lr: float = 3e-3, weight_decay: float = 1e-4, node_feature_mask: list[int] | None = None,
                 edge_feature_mask: list[int] | None = None, keep_best: bool = False,
                 prior_dropout: float = 0.0, name_dropout: float = 0.0,
                 prior_dropout_backends: list[str] | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = FusionGNN(FUSION_NODE_FEATURES, FUSION_EDGE_FEATURES, num_backends=len(BACKENDS),
                             hidden=hidden, layers=layers, conv=conv, dropout=dropout)
        mask = torch.ones(FUSION_NODE_FEATURES)
        for i in node_feature_mask or []:
            mask[i] = 0.0
        self.register_buffer("feature_mask", mask, persistent=False)
        edge_mask = torch.ones(FUSION_EDGE_FEATURES)
        for i in edge_feature_mask or []:
            edge_mask[i] = 0.0
        self.register_buffer("edge_feature_mask", edge_mask, persistent=False)
        self._best: tuple[float, dict] | None = None

    def forward(self, batch, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        edge_attr = batch.edge_attr if edge_attr is None else edge_attr
        return self.net(batch.x * self.feature_mask, batch.edge_index, edge_attr * self.edge_feature_mask,
                        batch.backend, batch.batch)

    def _with_columns_dropped(self, batch) -> torch.Tensor:
        """The batch's edge features with the prior columns zeroed on a random ``prior_dropout`` share of
        graphs and the exporter-name column on a random ``name_dropout`` share."""
        edge_attr = batch.edge_attr.clone()
        prior_backends = self.hparams.prior_dropout_backends or BACKENDS
        may_drop_prior = torch.tensor([b in prior_backends for b in BACKENDS], device=edge_attr.device)[batch.backend]
        for share, columns, eligible in (
                (self.hparams.prior_dropout, list(PRIOR_COLUMNS.values()), may_drop_prior),
                (self.hparams.name_dropout, [EXPORT_NAME_COLUMN], torch.ones_like(may_drop_prior))):
            if share > 0:
                dropped = (torch.rand(batch.num_graphs, device=edge_attr.device) < share) & eligible
                edge_dropped = dropped[batch.batch[batch.edge_index[0]]]
                for column in columns:
                    edge_attr[edge_dropped, column] = 0.0
        return edge_attr

    def _step(self, batch, stage: str) -> torch.Tensor:
        training = stage == "train" and (self.hparams.prior_dropout > 0 or self.hparams.name_dropout > 0)
        logits = self(batch, self._with_columns_dropped(batch) if training else None)[batch.edge_mask]
        target = batch.y[batch.edge_mask]
        loss = F.binary_cross_entropy_with_logits(logits, target)
        accuracy = ((logits > 0).float() == target).float().mean()
        self.log(f"{stage}/loss", loss, batch_size=batch.num_graphs, prog_bar=stage == "val")
        self.log(f"{stage}/edge_acc", accuracy, batch_size=batch.num_graphs, prog_bar=stage == "val")
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        """Remember the weights of the epoch with the lowest validation loss (held-out families)."""
        loss = self.trainer.callback_metrics.get("val/loss")
        if not self.hparams.keep_best or loss is None or self.trainer.sanity_checking:
            return
        if self._best is None or float(loss) < self._best[0]:
            self._best = (float(loss), {k: v.detach().clone() for k, v in self.net.state_dict().items()})

    def on_fit_end(self) -> None:
        if self._best is not None:
            self.net.load_state_dict(self._best[1])

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        steps = self.trainer.estimated_stepping_batches if self.trainer else 1000
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=max(1, steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
