"""ONNX loss ops that eager PyTorch runs as more than one kernel, written as the ops it runs.

``F.cross_entropy`` exports (TorchScript and dynamo alike) as one ``SoftmaxCrossEntropyLoss`` node, which ONNX
defines as a function of ``LogSoftmax`` and ``NegativeLogLikelihoodLoss``; eager runs exactly those two, a
``log_softmax`` kernel and an ``nll_loss`` kernel. Priced as one softmax kernel, the program lost a kernel and its
launch (a cross-entropy over 16 x 1000 scores on an A10G: 0.10 ms, about 30 us short).
"""
from __future__ import annotations

import onnx
from onnx import helper

_ONNX = ("", "ai.onnx")
#: The attributes ``NegativeLogLikelihoodLoss`` shares with ``SoftmaxCrossEntropyLoss``.
_SHARED = ("reduction", "ignore_index")


def split_cross_entropy(model: onnx.ModelProto) -> list[str]:
    """Write every ``SoftmaxCrossEntropyLoss`` as its ``LogSoftmax`` and ``NegativeLogLikelihoodLoss`` (in place, the
    ONNX function's definition); the names of the nodes written so."""
    graph = model.graph
    if not any(n.op_type == "SoftmaxCrossEntropyLoss" and n.domain in _ONNX for n in graph.node):
        return []
    split: list[str] = []
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if node.op_type != "SoftmaxCrossEntropyLoss" or node.domain not in _ONNX or len(node.input) < 2 \
                or not node.output or not node.output[0]:
            nodes.append(node)
            continue
        label = node.name or f"SoftmaxCrossEntropyLoss_{index}"
        log_prob = node.output[1] if len(node.output) > 1 and node.output[1] else f"{label}/lilou_unfused/log_prob"
        nodes.append(helper.make_node("LogSoftmax", [node.input[0]], [log_prob], name=f"{label}/log_softmax", axis=1))
        loss = helper.make_node("NegativeLogLikelihoodLoss", [log_prob, *node.input[1:3]], [node.output[0]], name=label)
        loss.attribute.extend(a for a in node.attribute if a.name in _SHARED)
        loss.metadata_props.extend(node.metadata_props)
        nodes.append(loss)
        split.append(label)
    del graph.node[:]
    graph.node.extend(nodes)
    return split
