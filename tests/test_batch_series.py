"""Graphs of one file at many batch sizes (lilou.graph.batch_series): derived graphs equal read ones, exactly."""
from __future__ import annotations

import onnx
import pytest
from onnx import helper

from lilou.graph.batch_series import BatchSeries, same_graph
from lilou.graph.dag import load_graph
from tests.onnx_builders import ints, make_model, tensor, weight

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


def series_against_reads(path, batches=BATCHES, largest: int | None = None) -> BatchSeries:
    """Ask a series for every batch and check each graph against the file read at that batch."""
    series = BatchSeries(path, largest=largest or max(batches))
    for batch in batches:
        graph = series.graph(batch)
        assert same_graph(graph, load_graph(path, batch=batch)), f"batch {batch}"
    return series


@pytest.mark.parametrize(("largest", "reads"), [(128, 3), (4, 8)])
def test_a_cnn_is_read_three_times_for_eight_batches(zoo_onnx, largest, reads):
    """ResNet-18's shapes are fixed or proportional to the batch: batches 1 and 2 are read, and the largest batch is
    read and derived (they match); the others are derived and equal their reads node for node. A series told a
    smaller largest batch derives nothing above it."""
    series = series_against_reads(zoo_onnx("resnet18", batch=1, dynamic_batch=True), largest=largest)
    assert series.reads == reads


def test_a_folded_constant_past_a_folding_limit_is_read(zoo_onnx):
    """ELECTRA-small's attention mask (folded from constants) grows past the 65,536 elements constant folding keeps
    as values at batch 128: derivation is checked at 64 instead, and 128 is read; every graph equals its read."""
    path = zoo_onnx("electra-small", batch=2, seq=32, dynamic_batch=True)
    series = series_against_reads(path)
    assert series.reads == 4
    first = series._first[1]  # the tensors folding evaluated at batch 1, and the one that crossed the limit
    crossed = {name for name, elements in first.evaluated.items() if elements <= 1 << 16 < elements * 128}
    assert crossed


def test_a_dimension_that_is_not_proportional_reads_every_batch(tmp_path):
    """A Concat of the input with one constant row has N + 1 rows: neither fixed nor proportional."""
    model = make_model([helper.make_node("Concat", ["x", "row"], ["y"], axis=0),
                        helper.make_node("Relu", ["y"], ["z"])],
                       [tensor("x", ["N", 16])], [tensor("z", None)], [weight("row", [1, 16])])
    path = tmp_path / "plus_one.onnx"
    onnx.save(model, path)
    series = series_against_reads(path, (1, 2, 4, 8))
    assert series.reads == 4
    assert series.graph(8).dag.nodes["Relu_1"]["outputs"][0].shape == (9, 16)


def test_a_dimension_fixed_over_the_first_batches_is_caught_at_the_largest(tmp_path):
    """ceil(N / 8) rows (Shape -> Gather -> Add 7 -> Div 8 -> ConstantOfShape) are 1 at batches 1, 2, 4 and 8: the
    first reads call the dimension fixed, and only a read at the largest batch (32: 4 rows) shows otherwise, so
    every batch is read and every graph equals its read."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Add", ["n", "seven"], ["n7"]),
             helper.make_node("Div", ["n7", "eight"], ["groups"]),
             helper.make_node("Unsqueeze", ["groups", "axes"], ["groups1"]),
             helper.make_node("Concat", ["groups1", "width"], ["dims"], axis=0),
             helper.make_node("ConstantOfShape", ["dims"], ["rows"]),
             helper.make_node("Relu", ["rows"], ["y"]),
             helper.make_node("Relu", ["x"], ["z"])]
    constants = [ints("zero", 0), ints("seven", 7), ints("eight", 8), ints("axes", [0]), ints("width", [16])]
    model = make_model(nodes, [tensor("x", ["N", 16])], [tensor("y", None), tensor("z", None)], constants)
    path = tmp_path / "ceil8.onnx"
    onnx.save(model, path)
    series = series_against_reads(path, (1, 2, 4, 8, 16, 32), largest=32)
    assert series.reads == 7  # 1, 2, the check at 32, then 4, 8, 16 and 32 read
    assert series.graph(32).dag.nodes["Relu_7"]["outputs"][0].shape == (4, 16)


def test_pinned_shapes_that_are_not_the_derived_ones_are_read(zoo_onnx):
    """Past the third batch a graph is derived only when the pinned input shapes are those derivation gives."""
    path = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    series = BatchSeries(path, largest=8)
    for batch in (1, 2, 4):
        series.graph(batch)
    name = series.graph(8).inputs[0].name
    assert series.reads == 3
    graph = series.graph(8, {name: (8, 3, 112, 112)})
    assert series.reads == 4 and graph.inputs[0].shape == (8, 3, 112, 112)
    assert same_graph(graph, load_graph(path, shapes={name: (8, 3, 112, 112)}))


def test_bad_input_at_a_derived_batch_is_the_same_one_line_error(zoo_onnx):
    """A batch whose tensors pass Lilou's 2^48-element limit fails with a read's one-line error (the plan skips it);
    the check of derivation, asked to reach it, stops at the largest batch below it that can be read."""
    from lilou.errors import LilouInputError

    series = BatchSeries(zoo_onnx("resnet18", batch=1, dynamic_batch=True), largest=1 << 40)
    for batch in (1, 2, 4):
        series.graph(batch)
    with pytest.raises(LilouInputError, match="2\\^48"):
        series.graph(1 << 40)


@pytest.mark.parametrize("batch", [0, -3])
def test_a_batch_that_is_not_positive_is_refused_after_derivation_is_trusted(zoo_onnx, batch):
    from lilou.errors import LilouInputError

    series = BatchSeries(zoo_onnx("resnet18", batch=1, dynamic_batch=True), largest=4)
    for good in (1, 2, 4):
        series.graph(good)
    with pytest.raises(LilouInputError, match="--batch must be a positive integer"):
        series.graph(batch)


def test_prefetched_reads_are_the_reads_and_unused_ones_are_stopped(zoo_onnx, monkeypatch):
    """``prefetch`` starts a read in its own child (what `plan` does for its second batch and the check at the
    largest): the graph asked for later is that read's, and a read never asked for is stopped at ``close``."""
    import os

    from lilou.graph import guarded_inference

    monkeypatch.setattr(guarded_inference, "_other_threads", lambda: False)  # threads earlier tests left behind
    path = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    series = BatchSeries(path, largest=8)
    series.prefetch(2)
    series.prefetch(16)  # never asked for
    pid = series._ahead[(16, ())]._child.pid
    assert same_graph(series.graph(2), load_graph(path, batch=2)) and series.reads == 1
    series.close()
    assert not series._ahead
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
