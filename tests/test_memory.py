"""The memory a graph needs: its weights and the activations live at once at the peak (lilou/graph/memory.py)."""
from __future__ import annotations

from lilou.graph.dag import load_graph
from lilou.graph.memory import memory_needed
from lilou.plan import plan_model


def test_the_peak_holds_a_node_s_inputs_beside_its_outputs(zoo_onnx):
    """ResNet-18's stem: the batch norm reads the convolution's output while writing its own, so both are held;
    the largest single tensor (what was counted before) is half that."""
    path = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    graph = load_graph(path, batch=1024)
    stem = 1024 * 64 * 112 * 112 * 4  # the first convolution's FP32 output
    largest = max(t.nbytes or 0 for n in graph.runtime_nodes() for t in graph.dag.nodes[n]["outputs"] if t is not None)
    weights, peak = memory_needed(graph)
    assert largest == stem and peak == 2 * stem
    assert weights == memory_needed(load_graph(path, batch=1))[0]  # weights do not grow with the batch


def test_a_plan_does_not_put_a_batch_on_a_slice_its_peak_does_not_fit(zoo_onnx):
    """At batch 1024 the stem holds 6.1 GiB at once, more than a 4.75 GiB 1g.5gb slice; the largest tensor alone
    (3.1 GiB with the weights) "fitted", and the plan chose 1024."""
    path = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    plan = plan_model(str(path), 1e6, gpus=["a100-sxm4-40gb/1g.5gb"], batches=[512, 1024])
    [row] = plan.entries
    assert row.point.batch == 512 and row.point.memory_gb < 4.25
