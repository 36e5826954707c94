"""A graph priced in another precision: its floating-point tensors stored as that precision stores them.

``--precision fp16`` on an FP32 export asks what the model costs run in FP16 (``model.half()``, an engine built in
FP16): the kernels on the FP16 path *and* half the bytes. Before, the path changed and the bytes stayed the file's
(an FP32 export asked in FP16 on a 300 GB/s L4 read twice the bytes the FP16 model reads). :func:`retyped` gives
every floating-point tensor of the graph the element type of the precision asked for: FP16 and BF16 2 bytes, FP8
and INT8 1 byte (weights and activations, as an FP8 or INT8 engine stores them), INT4 4-bit weights with FP16
activations (weight-only, W4A16), FP4 4 bits both (NVFP4). A quantized file's quantized tensors (its INT8 or FP8
activations and weights, INT32 biases and accumulators: :func:`lilou.graph.quantized.quantized_tensors`) are
floating-point values stored so, and are stored as the precision asked stores floats: ``--precision fp16`` on an INT8
ResNet-50 kept its 1-byte activations (1.3 GB moved at batch 32, against the FP16 model's 5.2 GB) while the note said
they were stored as FP16. Integer tensors (token ids, masks, shapes) keep their types; FLOPs do not change; the bytes
of every node are counted again.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from lilou.graph.costs import CONTROL_FLOW_OPS, CostInput, TensorInfo, node_cost

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph

#: Element types a precision stores (activations, weights) in, with their byte widths (4-bit: SUB_BYTE_BITS).
STORAGE = {
    "fp32": ("float32", "float32"), "tf32": ("float32", "float32"), "fp16": ("float16", "float16"),
    "bf16": ("bfloat16", "bfloat16"), "fp8": ("float8_e4m3fn", "float8_e4m3fn"), "int8": ("int8", "int8"),
    "int4": ("float16", "int4"), "fp4": ("float4_e2m1fn", "float4_e2m1fn"),
}
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "int8": 1, "int4": 1, "float4_e2m1fn": 1}
FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64"})


def retyped(graph: ModelGraph, precision: str, activations: str | None = None) -> ModelGraph:
    """``graph`` with its floating-point tensors in ``precision``'s storage (``graph`` itself where none changes);
    ``activations``: their element type instead of the precision's (``float16`` for weight-only FP8 kernels, W8A16,
    on a GPU without FP8 tensor cores)."""
    activation, weight = STORAGE[precision]
    activation = activations or activation
    weights = graph.constant_tensors()
    if precision == "int4":  # no runtime runs INT4 (W4A16) convolutions: their weights stay 16-bit, an FP16 convolution
        weights = weights - {t.name for _, data in graph.dag.nodes(data=True) if data["op"] in ("Conv", "ConvTranspose")
                             for t in data["inputs"] if t is not None}
    # an INT8 or FP8 model keeps a quantized file's types (its INT32 biases and accumulators are an INT8 engine's)
    keeps = precision in ("int8", "fp8") and activations is None
    quantized = frozenset() if keeps else graph.dag.graph.get("quantized", frozenset())
    changed: dict[str, TensorInfo] = {}

    def stored(tensor: TensorInfo | None) -> TensorInfo | None:
        if tensor is None or (tensor.dtype not in FLOAT_DTYPES and tensor.name not in quantized):
            return tensor
        target = weight if tensor.name in weights else activation
        if tensor.dtype == target:
            return tensor
        if tensor.name not in changed:
            changed[tensor.name] = dataclasses.replace(tensor, dtype=target, itemsize=_ITEMSIZE[target])
        return changed[tensor.name]

    dag = graph.dag.copy()
    for _, data in dag.nodes(data=True):
        inputs, outputs = [stored(t) for t in data["inputs"]], [stored(t) for t in data["outputs"]]
        if inputs == data["inputs"] and outputs == data["outputs"]:
            continue
        data["inputs"], data["outputs"] = inputs, outputs
        if data["op"] not in CONTROL_FLOW_OPS:  # their bytes are their bodies', kept
            cost = node_cost(CostInput(op=data["op"], attributes=data["attributes"], inputs=inputs, outputs=outputs))
            data["bytes_read"], data["bytes_written"] = cost.bytes_read, cost.bytes_written
    if not changed:
        return graph
    produced = {t.name: t for _, data in dag.nodes(data=True) for t in data["outputs"] if t is not None}
    for _, _, edge in dag.edges(data=True):  # the copy's own attribute dicts
        if any(name in changed for name in edge["tensors"]):
            edge["dtype"] = produced[edge["tensor"]].dtype if edge["tensor"] in produced else edge["dtype"]
            edge["bytes"] = sum(produced[name].nbytes or 0 for name in edge["tensors"] if name in produced)
    return dataclasses.replace(graph, dag=dag, inputs=[stored(t) for t in graph.inputs],
                               outputs=[stored(t) for t in graph.outputs])


def without_redundant_casts(original: ModelGraph, graph: ModelGraph) -> tuple[ModelGraph, list[str]]:
    """``graph`` (``original`` retyped) less the Casts it made casts to their own type, and their names: a mixed
    precision file's conversions between its islands, once both sides are stored alike. Their readers read what they
    cast, and a graph output a Cast wrote is the tensor it cast. Eager's ``.to()`` of a tensor of that type returns the
    tensor, and the file typed so has no Cast there: kept, the casts split the kernels they sat between (the bias add
    of a linear layer from its matmul: BERT-base with half its matmuls kept in FP32 by onnxconverter-common, asked in
    FP16, had 244 kernels, the FP16 file 208). The cast to FP32 of the output that ``keep_io_types`` writes was kept as
    a kernel until 2026-12-07 (a Cast writing a graph output stayed): the two-layer BERT of ``tests/data/typed`` so
    converted, asked in FP16, had 42 kernels where its FP32 export asked in FP16 has 41."""
    before = original.dag.nodes

    def converts(data: dict) -> bool:
        source = data["inputs"][0] if data["inputs"] else None
        output = data["outputs"][0] if data["outputs"] else None
        return source is not None and output is not None and source.dtype != output.dtype

    casts = [name for name, data in graph.dag.nodes(data=True)
             if data["op"] == "Cast" and not data["constant"] and data["inputs"] and data["outputs"]
             and data["inputs"][0] is not None and data["outputs"][0] is not None
             and not converts(data)
             and name in before and converts(before[name])]
    return (_spliced(graph, casts), casts) if casts else (graph, [])


def batch_norms_int8_runtimes_fold(graph: ModelGraph) -> tuple[list[str], list[str]]:
    """The inference batch norms an INT8 or FP8 runtime folds into the convolution before them (TensorRT and
    onnxruntime fold every one): (those Lilou restored where the exporter had folded them, those the file writes
    after a convolution whose output nothing else reads). A plain export keeps ResNet-50's 53 as nodes, an
    ``--optimize``d one folds them: ``--precision int8`` priced the first 25-30 % slower on a T4, an A100 and an
    H100, and NVIDIA ModelOpt's FP8 ResNet (its 20 batch norms left for TensorRT) slower than its FP32 file. Before
    only the restored ones were folded: ``--precision int8`` on a TorchScript ResNet-50 priced 53 of them, 2.6 ms of
    12.8 on a T4 at batch 32, where its INT8 file gives 8.1 ms."""
    from lilou.graph.folded_norms import is_restored_batch_norm

    dag = graph.dag
    data = dag.nodes
    outputs = {t.name for t in graph.outputs if t is not None}
    restored, written = [], []
    for name in graph.runtime_nodes():
        norm = data[name]
        if norm["op"] != "BatchNormalization":
            continue
        if is_restored_batch_norm(name, norm):
            restored.append(name)
            continue
        source = norm["inputs"][0] if norm["inputs"] else None
        if source is None or norm["attributes"].get("training_mode", 0) or source.name in outputs:
            continue
        writer = graph.writer(name, source.name)
        if writer is not None and data[writer]["op"] in ("Conv", "ConvTranspose") \
                and all(reader == name for reader in dag.successors(writer)):
            written.append(name)
    return restored, written


def without_batch_norms(graph: ModelGraph, norms: list[str]) -> ModelGraph:
    """``graph`` less the batch norms ``norms`` (each after a convolution: :func:`batch_norms_int8_runtimes_fold`),
    folded into the convolution before them: one without a bias takes the norm's shift as its bias."""
    if not norms:
        return graph
    dag = graph.dag.copy()
    for name in norms:
        norm = dag.nodes[name]
        source = norm["inputs"][0]
        writer = next((p for p in dag.predecessors(name) if source is not None
                       and source.name in dag.edges[p, name]["tensors"]), None)
        conv = dag.nodes[writer] if writer is not None else None
        if conv is not None and conv["op"] in ("Conv", "ConvTranspose") and len(conv["inputs"]) == 2 \
                and len(norm["inputs"]) > 2 and norm["inputs"][2] is not None:
            conv["inputs"] = [*conv["inputs"], norm["inputs"][2]]  # the fold's shift, the convolution's bias again
            cost = node_cost(CostInput(op=conv["op"], attributes=conv["attributes"], inputs=conv["inputs"],
                                       outputs=conv["outputs"]))
            conv["flops"], conv["bytes_read"], conv["bytes_written"] = cost.flops, cost.bytes_read, cost.bytes_written
    return _spliced(dataclasses.replace(graph, dag=dag), norms)


def _spliced(graph: ModelGraph, names: list[str]) -> ModelGraph:
    """``graph`` less the nodes ``names``, each of which passes its first input on as its first output: their
    readers read that input."""
    dag = graph.dag.copy()
    for name in sorted(names, key=lambda n: dag.nodes[n]["order"]):
        data = dag.nodes[name]
        source, output = data["inputs"][0], data["outputs"][0]
        writer = next((p for p in dag.predecessors(name) if source.name in dag.edges[p, name]["tensors"]), None)
        for reader in list(dag.successors(name)):
            read = dag.nodes[reader]
            read["inputs"] = [source if t is not None and t.name == output.name else t for t in read["inputs"]]
            if writer is None:
                continue
            if dag.has_edge(writer, reader):
                edge = dag.edges[writer, reader]
                if source.name not in edge["tensors"]:
                    edge["tensors"] = [*edge["tensors"], source.name]
                    edge["bytes"] = edge["bytes"] + (source.nbytes or 0)
            else:
                dag.add_edge(writer, reader, tensor=source.name, tensors=[source.name], shape=source.shape,
                             dtype=source.dtype, bytes=source.nbytes or 0)
        dag.remove_node(name)
    outputs = {data["outputs"][0].name: data["inputs"][0] for data in (graph.dag.nodes[n] for n in names)}
    return dataclasses.replace(graph, dag=dag, outputs=[outputs.get(t.name, t) if t is not None else t
                                                        for t in graph.outputs])
