"""Fusion-GNN ablation: architecture, depth, feature groups removed one at a time, baselines.

Every variant is the held-out protocol of the shipped recipe (``experiment=fusion_gnn_heldout``, as
``make bench-fusion`` trains it: one GNN for both backends, ``data.train_splits=[train]``) with a few Hydra
overrides (``model.conv``, ``model.layers``, ``model.node_feature_mask``, ``model.edge_feature_mask``), trained
on the ``train`` split of the fusion dataset alone and scored per backend on the held-out test families (never
seen in training, at any size or exporter). The shipped recipe itself (``experiment=fusion_gnn``) also learns
from the test splits, so it is never used here; ``data.train_splits`` cannot be overridden.
The rule baseline is tuned on the training families only; each backend's replay (the prior the GNN reads: TVM's FuseOps, eager's
view semantics) is scored alone as a second baseline. Prints edge accuracy, fused-edge F1 and exact-partition rate and
writes outputs/results/ablate_fusion.{csv,png,json}.

    python scripts/ablate_fusion.py [--quick] [--epochs N] [--seed S] [--data datasets/fusion]
                                    [--backends eager,tvm] [--test-graphs N] [--out DIR] [overrides ...]

``--out`` (default outputs/results) is created and checked before any training.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lilou.errors import exit_on_input_error  # noqa: E402
from lilou.research.ablation import (REPO, RESULTS, cached_fusion_samples, compose, data_dir,  # noqa: E402
                                     pyplot, quiet_lightning, refuse_owned_overrides, save_figure, write_result)
from lilou.runs import writable_folder  # noqa: E402

NAME = "ablate_fusion"
METRICS = ("edge_accuracy", "f1", "exact_partition")
# The held-out protocol (train split only). experiment=fusion_gnn, the shipped recipe, trains on the test splits
# too: an ablation composed from it scored every GNN variant on graphs it had been trained on.
EXPERIMENT = "fusion_gnn_heldout"


def feature_groups() -> dict[str, list[int]]:
    """Node-feature columns by group, from the feature module itself."""
    from lilou.fusion.features import FUSION_NODE_FEATURES, node_feature_groups

    groups = node_feature_groups()
    covered = sorted(i for cols in groups.values() for i in cols)
    if covered != list(range(FUSION_NODE_FEATURES)):
        raise RuntimeError("node_feature_groups() in lilou/fusion/features.py does not cover every column")
    return groups


def variants() -> list[tuple[str, str, list[str]]]:
    shipped = compose([f"experiment={EXPERIMENT}"]).model
    out = [(f"shipped config: {shipped.conv.upper()}, {shipped.layers} layers", "architecture", []),
           ("GAT", "architecture", ["model.conv=gat"]),
           ("GraphSAGE", "architecture", ["model.conv=sage"]),
           ("GCN", "architecture", ["model.conv=gcn"])]
    out += [(f"{shipped.conv.upper()}, {n} layer{'s' if n > 1 else ''}", "depth", [f"model.layers={n}"]) for n in (1, 2, 4, 6)
            if n != shipped.layers]
    out += [(f"- {group}", "features", [f"model.node_feature_mask=[{','.join(map(str, cols))}]"])
            for group, cols in feature_groups().items()]
    from lilou.fusion.features import edge_feature_groups

    out += [(f"- {group}", "features", [f"model.edge_feature_mask=[{','.join(map(str, cols))}]"])
            for group, cols in edge_feature_groups().items()]
    return out


@contextlib.contextmanager
def cached_arrays():
    """GNN inputs of each test graph computed once for every variant (keyed by the graph object)."""
    from lilou.fusion import gnn_predictor

    original = gnn_predictor.fusion_arrays
    cache: dict[int, tuple] = {}

    def fusion_arrays(graph, labels=None):
        if labels is not None:
            return original(graph, labels)
        if id(graph) not in cache:
            cache[id(graph)] = (graph, original(graph))
        return cache[id(graph)][1]

    gnn_predictor.fusion_arrays = fusion_arrays
    try:
        yield
    finally:
        gnn_predictor.fusion_arrays = original


def default_data() -> Path:
    """datasets/fusion (make fusion-data) when it has graphs, else the mirror's fusion/ folder."""
    local = REPO / "datasets" / "fusion"
    mirror = Path(data_dir()) / "fusion" if data_dir() else None
    if not any(local.glob("*/*.onnx")) and mirror is not None and any(mirror.glob("*/*.onnx")):
        return mirror
    return local


def test_graphs(root: Path, backends: list[str], limit: int | None) -> dict[str, list]:
    from lilou.fusion.benchmark import iter_labelled

    graphs = {}
    for backend in backends:
        found = list(iter_labelled(root, "test", backend))
        if limit and len(found) > limit:  # an even spread over families and sizes
            found = [found[i] for i in np.linspace(0, len(found) - 1, limit).round().astype(int)]
        graphs[backend] = found
    return graphs


def rows_for(variant: str, ablation: str, scores: dict[str, dict], seconds: float | None) -> list[dict]:
    rows = []
    for backend, by_group in scores.items():
        metrics = by_group.get("all", {})
        rows.append({"variant": variant, "ablation": ablation, "backend": backend, "graphs": metrics.get("graphs"),
                     "edges": metrics.get("edges"), **{m: 100 * metrics[m] for m in METRICS if m in metrics},
                     "ms_per_graph": metrics.get("ms_per_graph"), "train_s": seconds})
    return rows


def variant_config(root: Path, backends: list[str], overrides: list[str]):
    """The Hydra config one variant trains with: the held-out protocol (``train`` split only) plus ``overrides``."""
    cfg = compose([f"experiment={EXPERIMENT}", f"data.root={root}", f"data.backends=[{','.join(backends)}]",
                   *overrides, "output_checkpoint=null", "trainer.enable_progress_bar=false"])
    if list(cfg.data.train_splits) != ["train"]:
        from lilou.errors import LilouInputError

        raise LilouInputError(f"ablate_fusion trains on the train split alone, got data.train_splits="
                           f"{list(cfg.data.train_splits)}")
    return cfg


def run(overrides: list[str], root: Path, backends: list[str], limit: int | None, log=print) -> list[dict]:
    from lilou.fusion.benchmark import score, tuned_rule_table
    from lilou.fusion.rules import rule_partition
    from lilou.fusion.training import fit

    started = time.perf_counter()
    graphs = test_graphs(root, backends, limit)
    log(f"test graphs: {', '.join(f'{b} {len(g)}' for b, g in graphs.items())} ({time.perf_counter() - started:.0f} s)")
    results = []
    for backend in backends:
        table = tuned_rule_table(root, backend)
        results += rows_for("rule baseline (tuned on train families)", "baseline",
                            {backend: score(graphs[backend], lambda g, t=table: rule_partition(g, t))}, None)
    if "tvm" in backends:
        from lilou.fusion.tvm_replay import replay_partition

        results += rows_for("TVM FuseOps replay alone (no learning)", "baseline",
                            {"tvm": score(graphs["tvm"], replay_partition)}, None)
    if "eager" in backends:
        from lilou.fusion.eager_replay import replay_eager_partition

        results += rows_for("eager view replay alone (no learning)", "baseline",
                            {"eager": score(graphs["eager"], replay_eager_partition)}, None)
    log(f"baselines: {time.perf_counter() - started:.0f} s")
    with cached_fusion_samples(), cached_arrays(), quiet_lightning():
        for variant, ablation, extra in variants():
            cfg = variant_config(root, backends, [*overrides, *extra])
            fit_start = time.perf_counter()
            predictor, _ = fit(cfg)
            seconds = time.perf_counter() - fit_start
            scores = {b: score(graphs[b], lambda g, b=b, p=predictor: p.predict(g, b)) for b in backends}
            results += rows_for(variant, ablation, scores, seconds)
            log(f"{variant}: {time.perf_counter() - started:.0f} s")
    return results


def summary(results: list[dict], backends: list[str]) -> list[dict]:
    table = []
    for variant in dict.fromkeys(r["variant"] for r in results):
        row = {"variant": variant, "ablation": next(r["ablation"] for r in results if r["variant"] == variant)}
        for r in results:
            if r["variant"] == variant:
                for metric, short in (("edge_accuracy", "edge acc"), ("f1", "F1"), ("exact_partition", "exact")):
                    row[f"{r['backend']} {short}"] = r.get(metric)
        table.append(row)
    return table


def plot(table: list[dict], backends: list[str], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 0.42 * len(table) + 1.6), sharey=True,
                             squeeze=False)
    y = np.arange(len(table))[::-1]
    for ax, backend in zip(axes[0], backends):
        ax.barh(y + 0.2, [r.get(f"{backend} F1") or 0 for r in table], height=0.4, label="fused-edge F1")
        ax.barh(y - 0.2, [r.get(f"{backend} exact") or 0 for r in table], height=0.4, label="exact partitions")
        ax.set_title(f"{backend}: held-out families")
        ax.set_xlabel("%")
        ax.set_xlim(0, 100)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_yticks(y, [r["variant"] for r in table], fontsize=8)
    save_figure(fig, path)


@exit_on_input_error("ablate_fusion.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="2 epochs on half the batches, 24 test graphs per backend: not for citing")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per variant (default 8; quick 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None,
                        help="fusion dataset (default datasets/fusion, else $LILOU_DATA_DIR/fusion)")
    parser.add_argument("--backends", default="eager,tvm")
    parser.add_argument("--test-graphs", type=int, default=None, help="test graphs per backend (default all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every variant, e.g. model.hidden=128")
    args = parser.parse_args(argv)
    from lilou.errors import MissingDataError

    args.data = args.data or default_data()
    if not any(args.data.glob("*/*.onnx")):
        raise MissingDataError(f"no fusion graphs under {args.data}; build them with `make fusion-data`")
    started = time.perf_counter()
    backends = args.backends.split(",")
    epochs = args.epochs or (2 if args.quick else 8)
    refuse_owned_overrides(args.overrides, {"seed": "--seed"})
    overrides = [f"seed={args.seed}", f"trainer.max_epochs={epochs}",
                 *(["+trainer.limit_train_batches=0.5", "+trainer.limit_val_batches=0.5"] if args.quick else []),
                 *args.overrides]
    limit = args.test_graphs or (24 if args.quick else None)
    writable_folder(args.out, "--out")  # a bad --out was found after every variant had trained, as a traceback
    results = run(overrides, args.data.resolve(), backends, limit)
    table = summary(results, backends)
    plot(table, backends, args.out / f"{NAME}.png")
    graphs = list(args.data.glob("*/*.onnx"))
    zoo = [p for p in graphs if not p.parent.name.startswith("op-")]  # op-<op>/: the decomposition corpus
    corpus = [p for p in graphs if p.parent.name.startswith("op-")]
    families, ops = {p.parent.name for p in zoo}, {p.parent.name for p in corpus}
    from lilou.fusion.dataset import TEST_FAMILIES, VAL_FAMILIES

    write_result(NAME, results, ["variant", "ablation", "backend", "graphs", "edges", *METRICS, "ms_per_graph",
                                 "train_s"],
                 title="Fusion on held-out families (%): edge accuracy, fused-edge F1, exact partitions",
                 table_rows=table,
                 table_columns=["variant", "ablation", *[f"{b} {m}" for b in backends
                                                         for m in ("edge acc", "F1", "exact")]],
                 seed=args.seed, quick=args.quick, started=started, out_dir=args.out,
                 data=(f"fusion dataset {args.data.relative_to(REPO) if args.data.resolve().is_relative_to(REPO) else args.data}"
                       f" ({len(zoo)} zoo graphs of {len(families)} families and {len(corpus)} decomposition-corpus "
                       f"graphs of {len(ops)} ops, labels from "
                       "the eager oracle (dynamo exporter metadata) and TVM 0.27 FuseOps without compiling); "
                       f"test families: {', '.join(sorted(TEST_FAMILIES))}; validation: {', '.join(sorted(VAL_FAMILIES))}"),
                 extra={"overrides": overrides, "variants": {v: o for v, _, o in variants()},
                        "test_graphs_per_backend": {r["backend"]: r["graphs"] for r in results},
                        "feature_groups": feature_groups(), "base_config": f"conf/experiment/{EXPERIMENT}.yaml",
                        "train_splits": ["train"]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
