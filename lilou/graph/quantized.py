"""Quantized ONNX graphs read as the INT8 (or FP8) model they describe.

onnxruntime's quantization tool (and Optimum's ORTQuantizer, NVIDIA's ModelOpt, TensorRT's workflows) writes a
quantized model in one of three forms:

- **QDQ**: ``QuantizeLinear``/``DequantizeLinear`` pairs around float ops. No runtime executes the pairs: INT8
  runtimes (TensorRT, onnxruntime's CUDA provider) fold the quantize into the op that writes the tensor and the
  dequantize into the op that reads it, and run that op on its INT8 unit.
- **QOperator**: ``QLinearConv``, ``QLinearMatMul`` and onnxruntime's ``QGemm``, ``QLinearAdd``, ``QLinearMul``,
  ``QLinearSoftmax`` ... ops whose inputs and outputs are INT8.
- **dynamic**: ``DynamicQuantizeLinear`` (the range of a tensor, then its quantized copy) before ``ConvInteger``
  and ``MatMulInteger`` (INT8 inputs, INT32 output).

Without this module every Q/DQ node was its own memory-bound fallback kernel and the convolutions and matmuls
between them FP32 (a QDQ ResNet priced at about twice its float export), and QOperator ops had no cost at all.
Here each form is written as the float ops it quantizes, and every tensor keeps the element type it has at run
time (:class:`QuantizedRewrite`): the math ops read INT8 tensors, so the model's precision is INT8 and its
convolutions and matmuls are priced on the INT8 unit (:mod:`lilou.graph.precision`), with INT8 bytes.

The written graph stays type-correct float for ONNX's shape inference (which needs one type per op): every
tensor whose type differs at run time is listed, and :func:`runtime_types` sets those types on the inferred
tensor table. What becomes what:

- a DequantizeLinear goes (its readers read the quantized tensor), except one that writes a graph output (a
  conversion kernel, written as a ``Cast``) or reads a constant (the weight, stored quantized: no kernel);
- a QuantizeLinear goes where every reader of its input is a quantize (the op before it writes the quantized
  tensor), else it is a conversion kernel (a graph input quantized, a tensor also read in float);
- a quantize/dequantize pair that writes a graph output goes whole (the op before it writes the float output);
- QLinear ops become their float op; ``ConvInteger``/``MatMulInteger`` a Conv/MatMul writing INT32;
  ``DynamicQuantizeLinear`` a range reduction and a conversion kernel;
- onnxruntime's ``MatMulNBits`` (a weight-only 4- or 8-bit matmul: onnxruntime-genai's INT4 models, blocked
  scales) and ``MatMulBnb4`` (bitsandbytes' FP4/NF4, transformers.js' ``bnb4`` files) a MatMul of the float
  activations by the weight stored in 4 (8) bits, [K, N], plus its bias; ``GatherBlockQuantized`` (an INT4
  embedding table, tied to the LM head) a Gather of the table stored in 4 bits writing floats; the scales (one
  per block of the weight, 1/16 of its INT4 bytes at blocks of 32) are not counted.

Kernels are still grouped as the backend groups the float ops (Lilou has no TensorRT backend): an INT8 runtime
fuses more (a convolution with its bias, activation and residual add), which the warnings say.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from lilou.graph.costs import TensorInfo
from lilou.graph.exporter_fusions import element_types, node_attribute

_ONNX = ("", "ai.onnx")
_MICROSOFT = "com.microsoft"
#: onnxruntime's own spelling of ONNX's quantize and dequantize (``UseQDQContribOps``: its 16-bit and QNN flows, any
#: opset), read as ONNX's: the same inputs, attributes and meaning.
_QDQ = ("QuantizeLinear", "DequantizeLinear")
_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})
#: Element types a quantized tensor has at run time.
QUANTIZED_TYPES = frozenset({TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4,
                             TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                             TensorProto.FLOAT8E5M2FNUZ})

_TYPE_NAMES = {TensorProto.INT8: "INT8", TensorProto.UINT8: "INT8", TensorProto.INT4: "INT4", TensorProto.UINT4: "INT4",
               TensorProto.FLOAT8E4M3FN: "FP8", TensorProto.FLOAT8E4M3FNUZ: "FP8", TensorProto.FLOAT8E5M2: "FP8",
               TensorProto.FLOAT8E5M2FNUZ: "FP8", TensorProto.INT16: "INT16", TensorProto.UINT16: "INT16"}

#: Names of the weights MatMulNBits stores in 4 or 8 bits (their float stand-ins end the same way).
_WEIGHT_ONLY_SUFFIXES = ("/lilou_4bit", "/lilou_8bit", "/lilou_4bit/lilou_as_float", "/lilou_8bit/lilou_as_float")

#: Types a quantizing node can write (opset 21 adds 16-bit integers); anything else in a file reads as UINT8.
_SIXTEEN_BIT = frozenset({TensorProto.INT16, TensorProto.UINT16})
_WRITABLE_TYPES = QUANTIZED_TYPES | _SIXTEEN_BIT | {TensorProto.INT32}

#: QLinear op -> (float op, positions of its data inputs, position of its output zero point or None).
_QLINEAR = {
    ("", "QLinearConv"): ("Conv", (0, 3, 8), 7),
    ("", "QLinearMatMul"): ("MatMul", (0, 3), 7),
    (_MICROSOFT, "QGemm"): ("Gemm", (0, 3, 6), 8),
    (_MICROSOFT, "QLinearAdd"): ("Add", (0, 3), 7),
    (_MICROSOFT, "QLinearMul"): ("Mul", (0, 3), 7),
    (_MICROSOFT, "QLinearSoftmax"): ("Softmax", (0,), 4),
    (_MICROSOFT, "QLinearSigmoid"): ("Sigmoid", (0,), 4),
    (_MICROSOFT, "QLinearLeakyRelu"): ("LeakyRelu", (0,), 4),
    (_MICROSOFT, "QLinearGlobalAveragePool"): ("GlobalAveragePool", (0,), 4),
    (_MICROSOFT, "QLinearAveragePool"): ("AveragePool", (0,), 4),
    ("", "ConvInteger"): ("Conv", (0, 1), None),
    ("", "MatMulInteger"): ("MatMul", (0, 1), None),
}
#: Attributes each float op keeps (the QLinear op's others describe its quantization).
_KEPT = {"Conv": ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
         "Gemm": ("alpha", "transA", "transB"), "Softmax": ("axis",), "LeakyRelu": ("alpha",),
         "AveragePool": ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")}
#: numpy names of the types :data:`_WRITABLE_TYPES` gives tensors at run time.
_RUNTIME_DTYPES = frozenset({"int8", "uint8", "int4", "uint4", "int16", "uint16", "int32", "float8_e4m3fn",
                             "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
#: Ops whose output has their first input's element type: a quantized tensor through them stays quantized.
_TYPE_PRESERVING = frozenset({"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                              "Slice", "Concat", "Split", "Pad", "Expand", "Tile", "Relu", "Resize", "Gather",
                              "DepthToSpace", "SpaceToDepth", "GlobalMaxPool"})


@dataclass
class QuantizedRewrite:
    """What :func:`restore_quantized_ops` wrote: counts of the ops it replaced, and the element type every listed
    tensor has at run time where the written graph (float for shape inference) says otherwise."""

    replaced: Counter[str] = field(default_factory=Counter)
    folded: list[str] = field(default_factory=list)          # file nodes no written node stands for (Q/DQ folded)
    runtime: dict[str, int] = field(default_factory=dict)   # tensor -> ONNX element type at run time
    stored: dict[str, int] = field(default_factory=dict)    # integer types the file states (value infos ...)

    def __bool__(self) -> bool:
        return bool(self.replaced)

    def note(self) -> str:
        """The line a prediction carries: what was read how, and what Lilou cannot stand behind."""
        weight_only = {op: count for op, count in self.replaced.items()
                       if op in ("MatMulNBits", "MatMulBnb4", "GatherBlockQuantized")}
        activations = {op: count for op, count in self.replaced.items() if op not in weight_only}
        lines = []
        if activations:
            counts = ", ".join(f"{count} {op}" for op, count in sorted(activations.items()))
            kinds = sorted({_TYPE_NAMES.get(k, "INT8") for name, k in self.runtime.items()
                            if k in _SIXTEEN_BIT | QUANTIZED_TYPES and not name.endswith(_WEIGHT_ONLY_SUFFIXES)})
            unit = "/".join(kinds) or "INT8"
            if "INT16" in kinds:  # onnxruntime's QUInt16/QInt16 activations (opset 21)
                unit += (" (16-bit integers have no GPU math unit: the convolutions and matmuls reading them are priced "
                         "as the float math a GPU runs them in, FP32)")
            if "DynamicQuantizeLinear" in activations:
                # the dynamic form quantizes at run time: nothing is folded, and the file writes every step as an op
                lines.append(f"dynamically quantized graph ({counts}): each DynamicQuantizeLinear is priced as the "
                             "range reduction and the conversion it runs at run time, and the casts, scale "
                             "multiplications and bias adds the file writes after each ConvInteger and MatMulInteger "
                             f"as kernels of their own, the convolutions and matmuls on the {unit} unit; at a small "
                             "batch these launches cost more than the INT8 math saves (a statically quantized QDQ or "
                             "QOperator file of the same model has none of them)")
            else:
                lines.append(f"quantized graph ({counts}): priced as the model it quantizes, its tensors in {unit} "
                             "between the quantized ops, each quantize and dequantize folded into the op beside it as "
                             "INT8 runtimes (TensorRT, onnxruntime) run them, and its convolutions and matmuls on the "
                             "unit of the type they read; kernels are grouped as the backend groups the float ops (an "
                             "INT8 runtime fuses more: bias, activation, residual add)")
        if weight_only:
            counts = ", ".join(f"{count} {op}" for op, count in sorted(weight_only.items()))
            lines.append(f"weight-only quantized ops ({counts}): priced as float matmuls and gathers reading their "
                         "weights in 4 or 8 bits, as a dequantizing kernel does (the per-block scales are not counted)")
        return "; ".join(lines)


def op_key(node: onnx.NodeProto) -> tuple[str, str]:
    """(domain, op type) of a node, ONNX's domain as ``""``, and onnxruntime's quantize and dequantize as ONNX's."""
    if node.domain in _ONNX or (node.domain == _MICROSOFT and node.op_type in _QDQ):
        return "", node.op_type
    return node.domain, node.op_type


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(op_key(n) in _QLINEAR
               or n.op_type in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulNBits",
                                "MatMulBnb4", "GatherBlockQuantized")
               for n in model.graph.node)


#: The model metadata key under which the rewrite lists the file's nodes it folded (:func:`folded_nodes`).
_FOLDED_KEY = "lilou.folded_nodes"


def restore_quantized_ops(model: onnx.ModelProto) -> QuantizedRewrite:
    """Write a quantized graph as its float ops in place (see the module's docstring); nothing for a float one. The
    names of the file's nodes that no written node stands for (a quantize or dequantize folded into the op beside
    it) are kept in the model's metadata, for :func:`folded_nodes`."""
    if not is_quantized(model):
        return QuantizedRewrite()
    check_quantizers(model)
    result = _Rewriter(model).run()
    if result.folded:
        entry = model.metadata_props.add()
        entry.key, entry.value = _FOLDED_KEY, json.dumps(result.folded)
    return result


_FP8_TYPES = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                        TensorProto.FLOAT8E5M2FNUZ})


def check_quantizers(model: onnx.ModelProto) -> None:
    """Quantize and dequantize nodes ONNX's checker or onnxruntime refuse are bad input, not priced: FP8 before
    opset 19 (where the ops take no FP8 type), a per-axis scale's ``axis`` outside the dimensions its input declares
    (onnxruntime fails when it runs it), a ``DynamicQuantizeLinear`` without its three outputs."""
    from lilou.errors import LilouInputError

    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 0)
    types = element_types(model.graph)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*model.graph.input, *model.graph.value_info)
             if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
    ranks.update((t.name, len(t.dims)) for t in model.graph.initializer)
    for index, node in enumerate(model.graph.node):
        if op_key(node)[0]:
            continue
        label = node.name or f"{node.op_type}_{index}"
        if node.op_type == "DynamicQuantizeLinear" and (len(node.output) != 3 or not all(node.output)):
            raise LilouInputError(f"node {label!r} (DynamicQuantizeLinear) has {sum(1 for o in node.output if o)} "
                                  "output(s) but writes three (the quantized tensor, its scale and zero point); the "
                                  "model is damaged")
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        kinds = {types.get(name) for name in node.input[:1] + node.input[2:3]} | {node_attribute(node, "output_dtype", 0)}
        if opset < 19 and kinds & _FP8_TYPES and node.domain in _ONNX:  # onnxruntime's own take FP8 at any opset
            raise LilouInputError(f"node {label!r} ({node.op_type}) quantizes to FP8, which the op takes from opset 19; "
                                  f"the file's opset is {opset} (onnxruntime and ONNX's checker refuse it): re-export "
                                  "it at opset 19 or later")
        axis, rank = node_attribute(node, "axis", None), ranks.get(node.input[0])
        per_axis = len(node.input) > 1 and ranks.get(node.input[1]) == 1  # a scalar scale ignores the axis
        if per_axis and isinstance(axis, int) and rank is not None and rank > 0 and not -rank <= axis < rank:
            raise LilouInputError(f"node {label!r} ({node.op_type}) has axis {axis} for its {rank}-D input "
                                  f"{node.input[0]!r}; the model is damaged")


def folded_nodes(model: onnx.ModelProto) -> tuple[str, ...]:
    """The file's nodes that :func:`restore_quantized_ops` folded into others (``lilou fuse`` lists them, as no
    kernel of their own)."""
    value = next((p.value for p in model.metadata_props if p.key == _FOLDED_KEY), None)
    try:
        names = json.loads(value) if value else []
    except ValueError:
        return ()
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


class _Rewriter:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.types = element_types(self.graph)
        self.constants = {t.name for t in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant" and node.output:
                self.constants.add(node.output[0])
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None:
                    self.types.setdefault(node.output[0], value.data_type)
        self.graph_inputs = {v.name for v in self.graph.input} - self.constants
        self.sources = self.constants | self.graph_inputs  # tensors no node of the graph writes
        self.graph_outputs = {v.name for v in self.graph.output}
        self.initializer_dims = {t.name: list(t.dims) for t in self.graph.initializer}
        self.int_values = _small_int_vectors(self.graph)  # a Reshape's target shape, for a packed table's dims
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        for node in self.graph.node:
            for name in node.input:
                if name:
                    self.readers.setdefault(name, []).append(node)
            for name in node.output:
                if name:
                    self.producer[name] = node
        self.result = QuantizedRewrite(stored={t: k for t, k in self.types.items() if k in _WRITABLE_TYPES})
        self.alias: dict[str, str] = {}       # tensor -> the tensor its readers read instead
        self.renamed: dict[str, str] = {}     # tensor -> the name its producer writes instead
        self.shims: dict[str, tuple[str, int]] = {}  # constant or graph input of another type -> its float stand-in
        self.shim_names: dict[str, str] = {}  # -> the name of the file's dequantize its stand-in takes the place of
        # the float type the stand-ins are written in: the scales' (an FP16 model quantized by ModelOpt: FP16)
        scales = Counter(self.types.get(n.input[1]) for n in self.graph.node
                         if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1)
        self.float_type = next((k for k, _ in scales.most_common() if k in _FLOATS), TensorProto.FLOAT)
        self.nodes: list[onnx.NodeProto] = []
        self.dropped: set[str] = set()        # outputs of file nodes whose only reader a rewrite replaced

    def run(self) -> QuantizedRewrite:
        replaced: list[tuple[onnx.NodeProto, str]] = []
        for index, node in enumerate(list(self.graph.node)):
            key = op_key(node)
            self.label = node.name or f"{node.op_type}_{index}"  # what Lilou calls the file's node (names.py)
            if not (node.input and node.input[0] and node.output and node.output[0]):
                self.nodes.append(node)  # a node without its data input or output: the checks name it
                continue
            if key == ("", "QuantizeLinear"):
                self._quantize(node)
            elif key == ("", "DequantizeLinear"):
                self._dequantize(node)
            elif key == ("", "DynamicQuantizeLinear"):
                self._dynamic(node)
            elif key in _QLINEAR and self._writable(node, key):
                self._qlinear(node, key)
            elif key == (_MICROSOFT, "QLinearConcat"):
                self._concat(node)
            elif key in ((_MICROSOFT, "MatMulNBits"), (_MICROSOFT, "MatMulBnb4")) and _nbits_shape(node) is not None:
                self._matmul_nbits(node)
            elif key == (_MICROSOFT, "GatherBlockQuantized") and self._table_dims(node) is not None:
                self._gather_quantized(node)
            else:
                self.nodes.append(node)
                continue
            self.result.replaced[node.op_type] += 1
            replaced.append((node, self.label))
        self.nodes = [node for node in self.nodes if not (node.output and node.output[0] in self.dropped)]
        for node in self.nodes:
            for i, name in enumerate(node.input):
                name = self._read(name)
                node.input[i] = self._float(name) if self.types.get(name) in QUANTIZED_TYPES else name
            for i, name in enumerate(node.output):
                node.output[i] = self.renamed.get(name, name)
        # a stand-in takes the name of the dequantize it replaces (the file's node, not an invented one)
        shims = [helper.make_node("Cast", [source], [shim], name=self.shim_names.get(source, f"{source}/lilou_as_float"),
                                  to=to)
                 for source, (shim, to) in self.shims.items()]
        del self.graph.node[:]
        self.graph.node.extend(shims + self.nodes)
        written = {node.name for node in self.graph.node}
        self.result.folded = [label for node, label in replaced
                              if label not in written and (node.name or node.output[0]) not in written]
        self._float_value_infos()
        return self.result

    # -- tensors -----------------------------------------------------------------------------------------------
    def _read(self, name: str) -> str:
        """What a reader of ``name`` reads after the rewrite (following dropped nodes and renamed outputs)."""
        seen = 0
        while name in self.alias and seen < 1000:
            name, seen = self.alias[name], seen + 1
        return self.renamed.get(name, name)

    def _float(self, name: str, to: int | None = None) -> str:
        """``name`` as a data input of a written float op: a constant or graph input of another type is read
        through a float stand-in (a no-kernel cast to its own run-time type), typed ``to`` for shape inference (the
        float type of the op reading it: its scale's; by default the model's, :attr:`float_type`)."""
        kind = self.types.get(name)
        if not name or kind is None or kind in _FLOATS or name not in self.sources:
            return name
        if name not in self.shims:
            self.shims[name] = (f"{name}/lilou_as_float", to or self.float_type)
            self.result.runtime[self.shims[name][0]] = kind
        return self.shims[name][0]

    def _scale_type(self, node: onnx.NodeProto, position: int = 1) -> int:
        """The float type of a quantizing node's scale (its float side's type), else the model's."""
        kind = self.types.get(node.input[position]) if len(node.input) > position else None
        return kind if kind in _FLOATS else self.float_type

    def _quantized_type(self, node: onnx.NodeProto, zero_point: int | None) -> int:
        """The element type a quantizing node writes: its zero point's, ``output_dtype``'s, else UINT8."""
        point = node.input[zero_point] if zero_point is not None and len(node.input) > zero_point else ""
        kind = self.types.get(point) if point else node_attribute(node, "output_dtype", None)
        return kind if kind in _WRITABLE_TYPES else TensorProto.UINT8

    def _only_read_by(self, name: str, op_type: str) -> bool:
        readers = self.readers.get(name, [])
        return bool(readers) and all(r.op_type == op_type for r in readers) and name not in self.graph_outputs

    def _cast(self, node: onnx.NodeProto, source: str, output: str, runtime: int | None) -> None:
        """A conversion kernel (or a no-kernel cast of a constant) in the node's place, typed as its scale."""
        self.nodes.append(helper.make_node("Cast", [source], [output], name=node.name or output,
                                           to=self._scale_type(node)))
        if runtime is not None and runtime not in _FLOATS:
            self.result.runtime[output] = runtime

    # -- rewrites ----------------------------------------------------------------------------------------------
    def _quantize(self, node: onnx.NodeProto) -> None:
        source, output = node.input[0], node.output[0]
        kind = self._quantized_type(node, 2)
        producer = self.producer.get(source)
        if output in self.graph_outputs:
            self._cast(node, source, output, kind)
        elif self._pair_to_output(output):
            # Q -> DQ -> graph output: the op before writes the float output itself.
            self.renamed[source] = self._dequantized_by(output).output[0]
            self.alias[output] = source
        elif (producer is not None and source not in self.constants and source not in self.graph_inputs
              and self._only_read_by(source, "QuantizeLinear")):
            self.alias[output] = source
            self.result.runtime[source] = kind
        else:
            self._cast(node, source, output, kind)

    def _pair_to_output(self, quantized: str) -> bool:
        """``quantized`` is read by one dequantize only, which writes a graph output, and the float tensor before
        the quantize is read by it alone and written by an op."""
        readers = self.readers.get(quantized, [])
        if len(readers) != 1 or readers[0].op_type != "DequantizeLinear" or not readers[0].output \
                or readers[0].output[0] not in self.graph_outputs:
            return False
        source = self.producer[quantized].input[0]
        return (source in self.producer and source not in self.constants
                and len(self.readers.get(source, [])) == 1 and source not in self.graph_outputs)

    def _dequantized_by(self, quantized: str) -> onnx.NodeProto:
        return self.readers[quantized][0]

    def _dequantize(self, node: onnx.NodeProto) -> None:
        source, output = node.input[0], node.output[0]
        if self.alias.get(source) is not None and self.renamed.get(self.alias[source]) == output:
            return  # the pair written to a graph output by the op before it
        if output in self.graph_outputs:
            self._cast(node, self._float(source, self._scale_type(node)), output, None)
        else:  # a weight stays stored quantized; an activation is read so
            self.alias[output] = self._float(source, self._scale_type(node))
            if source in self.shims:
                self.shim_names.setdefault(source, self.label)

    def _dynamic(self, node: onnx.NodeProto) -> None:
        """The range of the tensor (one reduction kernel), then its quantized copy (a conversion kernel)."""
        source = node.input[0]
        quantized, scale = node.output[0], node.output[1] if len(node.output) > 1 else ""
        point = node.output[2] if len(node.output) > 2 else ""
        label = node.name or quantized
        scale = scale or f"{label}/lilou_range"
        self.nodes.append(helper.make_node("ReduceMax", [source], [scale], name=f"{label}/lilou_range", keepdims=0))
        self.nodes.append(helper.make_node("Cast", [source], [quantized], name=label, to=TensorProto.FLOAT))
        self.result.runtime[quantized] = TensorProto.UINT8
        if point and self.readers.get(point):
            self.nodes.append(helper.make_node("Cast", [scale], [point], name=f"{label}/lilou_zero_point",
                                               to=TensorProto.FLOAT))
            self.result.runtime[point] = TensorProto.UINT8

    def _writable(self, node: onnx.NodeProto, key: tuple[str, str]) -> bool:
        """QLinear ops with a layout the float op has (channels-last pools do not) and their data inputs present."""
        if node_attribute(node, "channels_last", 0):
            return False
        positions = _QLINEAR[key][1]
        return len(node.input) > positions[0] and all(node.input[p] for p in positions[:2] if p < len(node.input))

    def _qlinear(self, node: onnx.NodeProto, key: tuple[str, str]) -> None:
        op, positions, zero_point = _QLINEAR[key]
        to = self._scale_type(node) if zero_point is not None else None  # x_scale (ConvInteger has none)
        inputs = [self._float(node.input[p], to) for p in positions if p < len(node.input) and node.input[p]]
        written = helper.make_node(op, inputs, [node.output[0]], name=node.name or node.output[0])
        written.attribute.extend(a for a in node.attribute if a.name in _KEPT.get(op, ()))
        self.nodes.append(written)
        if zero_point is None:
            kind = TensorProto.INT32
        elif key == (_MICROSOFT, "QGemm") and not (len(node.input) > 7 and node.input[7]):
            kind = TensorProto.FLOAT  # a QGemm without an output scale writes float
        else:
            kind = self._quantized_type(node, zero_point)
        if kind not in _FLOATS:
            self.result.runtime[node.output[0]] = kind

    def _concat(self, node: onnx.NodeProto) -> None:
        """``QLinearConcat(Y_scale, Y_zero_point, X1, X1_scale, X1_zero_point, ...)`` -> Concat(X1, ...)."""
        inputs = [self._float(node.input[i]) for i in range(2, len(node.input), 3)]
        written = helper.make_node("Concat", inputs, [node.output[0]], name=node.name or node.output[0])
        written.attribute.extend(a for a in node.attribute if a.name == "axis")
        self.nodes.append(written)
        self.result.runtime[node.output[0]] = self._quantized_type(node, 1)

    def _matmul_nbits(self, node: onnx.NodeProto) -> None:
        """``MatMulNBits(A, B, scales, [zero points], [group index], [bias])`` -> MatMul(A, the weight as stored,
        [K, N] in 4 or 8 bits) [+ bias]: float math reading a quantized weight (:mod:`lilou.graph.precision`)."""
        k, n, bits = _nbits_shape(node)
        weight = self._stored_weight(node.input[1], [k, n], bits)
        bias = node.input[5] if len(node.input) > 5 and node.input[5] else ""
        product = f"{node.output[0]}/lilou_matmul" if bias else node.output[0]
        self.nodes.append(helper.make_node("MatMul", [node.input[0], self._float(weight)], [product],
                                           name=node.name or node.output[0]))
        if bias:
            self.nodes.append(helper.make_node("Add", [product, bias], [node.output[0]],
                                               name=f"{node.name or node.output[0]}/lilou_bias"))

    def _stored_weight(self, packed: str, dims: list[int], bits: int) -> str:
        """A stand-in initializer for the weight ``packed`` holds, ``dims`` in ``bits`` bits: shapes only, no bytes."""
        weight = f"{packed}/lilou_{bits}bit"
        if weight not in self.types:
            stored = TensorProto(name=weight, data_type=TensorProto.FLOAT, dims=dims)
            stored.data_location = TensorProto.EXTERNAL
            length = -(-int(np.prod(dims, dtype=np.float64)) * bits // 8)
            for key, value in (("location", "lilou-weight-only"), ("offset", "0"), ("length", str(length))):
                entry = stored.external_data.add()
                entry.key, entry.value = key, value
            self.graph.initializer.append(stored)
            self.types[weight] = TensorProto.UINT4 if bits == 4 else TensorProto.UINT8
            self.result.stored[weight] = self.types[weight]  # its bytes in memory, as its readers' through the shim
            self.constants.add(weight)
            self.sources.add(weight)
        return weight

    def _table_dims(self, node: onnx.NodeProto) -> list[int] | None:
        """The logical [rows, ...] of a GatherBlockQuantized table: its dims (an initializer, or a Reshape of one to
        a constant shape), the quantized axis widened where the table packs two 4-bit values per byte."""
        bits = int(node_attribute(node, "bits", 4))
        axis = int(node_attribute(node, "quantize_axis", 1))
        if bits not in (4, 8) or len(node.input) < 3 or not node.input[1] or not node.input[2]:
            return None
        data = node.input[0]
        dims = self.initializer_dims.get(data)
        producer = self.producer.get(data)
        if dims is None and producer is not None and producer.op_type == "Reshape" and len(producer.input) > 1:
            dims = self.int_values.get(producer.input[1])
        if not dims or any(d <= 0 or d > 2**40 for d in dims) or not -len(dims) <= axis < len(dims):
            return None
        dims = list(dims)
        if self.types.get(data, TensorProto.UINT8) == TensorProto.UINT8 and bits == 4:
            dims[axis] *= 2
        return dims

    def _gather_quantized(self, node: onnx.NodeProto) -> None:
        """``GatherBlockQuantized(data, indices, scales, [zero points])`` -> Gather of the table stored in 4 (8) bits,
        writing the scales' float type."""
        bits = int(node_attribute(node, "bits", 4))
        dims = self._table_dims(node)
        head = self._tied_head(node.input[0], dims)
        if head is not None:  # the LM head's weight, [hidden, vocab]: its transpose (a view), stored once
            if len(self.readers.get(node.input[0], [])) == 1:  # the packed table's reshape goes with the gather
                self.dropped.add(node.input[0])
            k, n, _ = _nbits_shape(head)
            table = f"{node.input[0]}/lilou_tied_table"
            self.nodes.append(helper.make_node("Transpose", [self._float(self._stored_weight(head.input[1], [k, n], bits))],
                                               [table], name=table, perm=[1, 0]))
        else:
            table = self._float(self._stored_weight(node.input[0], dims, bits))
        self.nodes.append(helper.make_node("Gather", [table, node.input[1]], [node.output[0]],
                                           name=node.name or node.output[0],
                                           axis=int(node_attribute(node, "gather_axis", 0))))
        kind = self.types.get(node.input[2], TensorProto.FLOAT)
        self.result.runtime[node.output[0]] = kind if kind in _FLOATS else TensorProto.FLOAT

    def _tied_head(self, data: str, dims: list[int]) -> onnx.NodeProto | None:
        """The MatMulNBits whose packed weight ``data`` reshapes (embeddings tied to the LM head), when the table is
        exactly its transpose ([vocab, hidden]; a table padded to whole blocks is not)."""
        producer = self.producer.get(data)
        if producer is None or producer.op_type != "Reshape" or not producer.input:
            return None
        for reader in self.readers.get(producer.input[0], []):
            shape = _nbits_shape(reader) if reader.op_type == "MatMulNBits" else None
            if shape is not None and reader.input[1] == producer.input[0] and [shape[1], shape[0]] == dims:
                return reader
        return None

    def _float_value_infos(self) -> None:
        """Value infos that could contradict the float graph go: every one not of a float type (inference writes
        them again; an INT32 accumulator read by a Reshape would otherwise clash), and a graph output's type unless
        float. The run-time types are kept in ``stored``."""
        kept = [v for v in self.graph.value_info if v.type.tensor_type.elem_type in _FLOATS
                and v.name not in self.result.runtime]
        del self.graph.value_info[:]
        self.graph.value_info.extend(kept)
        for value in self.graph.output:
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type not in _FLOATS:
                value.type.tensor_type.elem_type = TensorProto.UNDEFINED  # inference states it


def _small_int_vectors(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Values of the 1-D INT64 constants of up to 8 elements (initializers and ``Constant`` nodes)."""
    named = [(t.name, t) for t in graph.initializer]
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            named += [(node.output[0], a.t) for a in node.attribute if a.name == "value" and a.HasField("t")]
    values = {}
    for name, tensor in named:
        if tensor.data_type != TensorProto.INT64 or len(tensor.dims) != 1 or not 0 < tensor.dims[0] <= 8 \
                or tensor.data_location == TensorProto.EXTERNAL:
            continue
        try:
            values[name] = [int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1)]
        except (ValueError, TypeError):
            continue
    return values


def _nbits_shape(node: onnx.NodeProto) -> tuple[int, int, int] | None:
    """(K, N, bits) of a MatMulNBits this module writes back: 4 or 8 bits, K and N positive, A given."""
    k, n = int(node_attribute(node, "K", 0)), int(node_attribute(node, "N", 0))
    bits = int(node_attribute(node, "bits", 4))
    if bits not in (4, 8) or not 0 < k <= 2**31 or not 0 < n <= 2**31 or len(node.input) < 2 or not node.input[1]:
        return None
    return k, n, bits


def runtime_types(tensors: Mapping[str, TensorInfo], rewrite: QuantizedRewrite,
                  nodes: Iterable[onnx.NodeProto]) -> dict[str, TensorInfo]:
    """The inferred tensor table with every tensor's run-time element type: the rewrite's, then the file's own
    quantized types where inference wrote float, then through ops that keep their input's type (in graph order)."""
    table = dict(tensors)

    def retype(name: str, kind: int) -> None:
        info = table.get(name)
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(kind))
        except (KeyError, TypeError, ValueError):
            return
        if info is not None and info.dtype != dtype.name:
            table[name] = replace(info, dtype=dtype.name, itemsize=dtype.itemsize)

    for name, kind in rewrite.runtime.items():
        retype(name, kind)
    for name, kind in rewrite.stored.items():
        if name not in rewrite.runtime and name in table and table[name].dtype in ("float32", "float16"):
            retype(name, kind)
    for node in nodes:
        if node.op_type not in _TYPE_PRESERVING or not node.input or node.input[0] not in table:
            continue
        source = table[node.input[0]]
        for output in node.output[:1]:
            info = table.get(output)
            if info is not None and info.dtype == "float32" and source.dtype in _RUNTIME_DTYPES \
                    and output not in rewrite.runtime:
                table[output] = replace(info, dtype=source.dtype, itemsize=source.itemsize)
    return table


#: The ops an INT8 runtime runs on its INT8 unit when their activation is quantized too.
_QUANTIZABLE_MATH = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})


def float_activation_note(tensors: Mapping[str, TensorInfo], nodes: Iterable[onnx.NodeProto]) -> str | None:
    """The line saying which matmuls and convolutions of a quantized graph read a quantized weight but a float
    activation (no quantize before them): runtimes dequantize the weight and run the op in float, as it is priced."""
    math = [n for n in nodes if n.op_type in _QUANTIZABLE_MATH and len(n.input) > 1]
    mixed = [n for n in math if n.input[0] in tensors and n.input[1] in tensors
             and tensors[n.input[1]].dtype in _RUNTIME_DTYPES and tensors[n.input[0]].dtype not in _RUNTIME_DTYPES]
    if not mixed:
        return None
    return (f"{len(mixed)} of the quantized graph's {len(math)} matmuls and convolutions read quantized weights but float "
            "activations (no quantize before them: onnxruntime's quantizer leaves the outputs of ops it does not "
            "quantize, its contrib ops among them, in float): runtimes dequantize those weights and run the op in "
            "float, and so they are priced (their weights read at their stored bytes)")


def quantized_tensors(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo]) -> frozenset[str]:
    """The tensors that are floating-point values stored quantized: typed float in the graph written for shape inference
    (``model``, inferred) and quantized (or an integer accumulator) at run time (``tensors``, :func:`runtime_types`),
    and the graph inputs and weights their float stand-ins cast to their own type. ``--precision`` stores these as it
    stores floats (:mod:`lilou.graph.retype`); token ids, masks and shapes are none of them."""
    candidates = {name for name, info in tensors.items() if info.dtype in _RUNTIME_DTYPES}
    if not candidates:
        return frozenset()
    graph = model.graph
    names = {v.name for v in (*graph.input, *graph.value_info, *graph.output)
             if v.name in candidates and v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in _FLOATS}
    for node in graph.node:  # a stand-in: a cast of a graph input or weight to its own run-time type
        if node.op_type == "Cast" and node.input and node.output and node.output[0] in names \
                and node.input[0] in candidates and tensors[node.input[0]].dtype == tensors[node.output[0]].dtype:
            names.add(node.input[0])
    return frozenset(names)

