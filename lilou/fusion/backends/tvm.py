"""TVM (Relax) fusion oracle: the kernels TVM compiles an ONNX model into for CUDA.

Nothing is compiled or run; only the IRModule is built and transformed, so a CPU suffices.

Pipeline (``tvm.relax.backend.cuda.pipeline`` for target ``{"kind": "cuda", "arch": "sm_80"}``, up to the
point where the set of kernels is fixed): import with a subclass of the Relax ONNX importer, then
DispatchSampling, DispatchSortScan, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR
and RewriteDataflowReshape (a fused function that only reshapes becomes a view and launches nothing).
DLight scheduling is skipped: it schedules each PrimFunc but does not change which ones exist. Every
``call_tir`` (or library ``call_dps_packed``) left in ``main`` is one kernel.

Node names. The importer keeps none, so :class:`_TaggingImporter` converts one ONNX node at a time and,
after each node, emits the node's outputs as bindings (otherwise a converter's last expression would be
bound while converting its *consumer*) followed by a marker binding; the relax Vars bound between two
markers belong to that node (markers are dead code; DeadCodeElimination drops them). LiftTransformParams
copies ``main`` with fresh Vars of the same (unique) names, so tags move over by name; LegalizeOps and
FoldConstant keep the Var objects. FuseOps does not: ``main`` gets fresh Vars and structurally equal fused
functions are shared, so :func:`_fused_members` replays each fused call against the pre-FuseOps ``main``
(parameters bound to the call's arguments, each inner binding matched to the pre-FuseOps binding with the
same operator and matched arguments). FuseTIR keeps ``main``'s Vars. Bindings a pass creates carry no tag.

Weight-stripped files. Weight bytes are never read: an initializer that is stripped, stored externally or
larger than 1 KiB becomes a function *parameter* (after ``num_input``, like ``keep_params_in_input=True``,
but no array is made: only a typed Var); small inline initializers (shape constants, biases of tiny
layers) stay relax constants as in a normal import. A real deployment folds weight-only computations
(transposed Gemm weights, reshaped biases, casts of weights) before FuseOps, because FoldConstant sees the
weights as constants. With weights as parameters FoldConstant cannot, so LiftTransformParams moves every
weight-only computation out of ``main`` into ``main_transform_params`` first, leaving ``main`` as it would
be after folding. ONNX nodes that only feed on weights are constant in our graph anyway, and
:func:`~lilou.fusion.partition.partition_from_groups` puts them in ``launches=False`` "constant" groups.
Two more things stopped a plain import of our exports, neither about weights: the importer only reads the
``value`` form of ``Constant`` (the dynamo exporter writes ``value_ints``/``value_float``...; "no value in
Constant"), so those are rewritten on the fly; and it trips on some shape subgraphs (``Expand`` of a
``Shape`` of a weight), so :func:`_fold_constants` evaluates the constant nodes that need no weight bytes
(with ONNX's reference evaluator, from static shapes and inline data) and the importer gets constants.

Mapping back. A node whose bindings land in several kernels (e.g. a converter that emits two ops TVM does
not fuse) merges those kernels into one group (union-find; counted in :class:`TvmFusionStats`), and
groups are closed under convexity (a node on a path between two nodes of one group joins it, merging its
kernel), so the groups can always run in some order. Runtime nodes with no binding in any kernel (identity,
a reshape that became a view, an elided cast) go in ``launches=False`` groups with reason "view".
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import sys
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from lilou.errors import LilouInputError
from lilou.fusion.partition import Partition, partition_from_groups
from lilou.graph.dag import ModelGraph, build_graph
from lilou.graph.names import unique_node_names

BACKEND = "tvm"
TARGET = {"kind": "cuda", "arch": "sm_80"}

#: Initializers above this size are weights: function parameters, never read (the zoo's strip limit).
_INLINE_INITIALIZER_BYTES = 1024
_MARKER = "lilou_node_marker"
#: Largest constant the oracle folds itself (shape subgraphs are tiny).
_FOLD_LIMIT_BYTES = 1 << 20
_KERNEL_CALLS = {"relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed"}
_CONSTANT_ATTRIBUTES = {"value_int": "int64", "value_ints": "int64", "value_float": "float32", "value_floats": "float32"}


@dataclass
class TvmFusionStats:
    """What the oracle saw, beyond the partition itself."""

    kernels_tvm: int = 0            #: kernels in TVM's main function (before any merge)
    kernels: int = 0                #: kernel groups in the partition
    no_kernel_groups: int = 0       #: launches=False groups in the partition
    split_nodes: list[str] = field(default_factory=list)   #: ONNX nodes whose bindings sat in >1 kernel
    kernels_merged: int = 0         #: kernels absorbed into another (split nodes or convexity)
    convexity_merges: int = 0       #: of those, merges needed only to keep groups convex
    absorbed_nodes: int = 0         #: kernel-less nodes inside a kernel (e.g. an Identity between fused ops)
    untagged_kernels: int = 0       #: kernels with no tagged binding (dropped; should be 0)
    weight_only_kernels: int = 0    #: kernels whose ONNX nodes are all constant (dropped; should be 0)


def unsupported_tvm_ops(model: onnx.ModelProto) -> list[str]:
    """ONNX op types (``domain.op`` outside the default domain) the Relax importer cannot convert."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    convert_map = _get_convert_map()
    opset = _default_opset(model)
    bad: set[str] = set()
    for node in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            bad.add(f"{node.domain}.{node.op_type}")
        elif node.op_type in ("Constant", "If"):
            continue
        elif node.op_type not in convert_map:
            bad.add(node.op_type)
        else:
            try:
                convert_map[node.op_type].get_converter(opset)
            except (NotImplementedError, ValueError, AttributeError):
                bad.add(f"{node.op_type} (opset {opset})")
    return sorted(bad)


def check_tvm_supported(model: onnx.ModelProto | str | os.PathLike[str]) -> None:
    """Raise :class:`LilouInputError` naming the op types TVM's ONNX importer cannot convert."""
    if not isinstance(model, onnx.ModelProto):
        model = _load_model(model)
    bad = unsupported_tvm_ops(model)
    if bad:
        raise LilouInputError(f"TVM cannot import op(s): {', '.join(bad)}")


def tvm_partition(model: onnx.ModelProto | str | os.PathLike[str], graph: ModelGraph | None = None) -> Partition:
    """Kernel groups of ONNX node names as TVM (Relax, CUDA sm_80) fuses ``model``."""
    return tvm_partition_with_stats(model, graph)[0]


def tvm_partition_with_stats(model: onnx.ModelProto | str | os.PathLike[str],
                             graph: ModelGraph | None = None) -> tuple[Partition, TvmFusionStats]:
    """:func:`tvm_partition` plus counts of what had to be merged or dropped."""
    if not isinstance(model, onnx.ModelProto):
        path = Path(model)
        model = _load_model(path)
        if graph is None:
            graph = build_graph(model, name=path.stem, restore_folded=False)
    else:
        if model.functions:  # as load_onnx does, so node names match the graph's
            model = onnx.inliner.inline_local_functions(model)
        if graph is None:
            graph = build_graph(model, name=model.graph.name or "model", restore_folded=False)
    check_tvm_supported(model)
    # Lilou writes an If as its branch and a Loop as its body per iteration (lilou.graph.branches, lilou.graph.loops):
    # those nodes are not the file's, which TVM imports; refused as Scan is (docs/fusion.md).
    control = sorted({node.op_type for node in model.graph.node if node.op_type in ("If", "Loop")})
    if control:
        raise LilouInputError(f"the TVM oracle does not handle control flow ({', '.join(control)}); "
                              "drop --oracle for the fusion model's prediction")
    names = unique_node_names(model.graph)
    if set(names) != set(graph.dag.nodes):
        raise ValueError(f"graph {graph.name!r} does not describe this model: its node names differ")

    folded = _fold_constants(model, graph, names)
    with _native_stderr_silenced():  # TVM's C++ logs warnings (pow, take modes...) straight to fd 2
        mod, tags = _import(model, names, {t.name: t.shape for t in graph.inputs if t.shape is not None}, folded)
        kernels, untagged = _kernels(mod, tags)
    return _to_partition(graph, names, kernels, untagged)


# --- import --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _native_stderr_silenced():
    """Send file descriptor 2 to a scratch file while native code runs."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    from lilou.graph.loading import load_onnx

    return load_onnx(path)


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from _all_nodes(sub)


def _is_weight(tensor: onnx.TensorProto) -> bool:
    """Stripped, external or large: a parameter whose bytes are never read."""
    if tensor.data_type == onnx.TensorProto.STRING:
        return False
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return True
    itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return math.prod(tensor.dims) * itemsize > _INLINE_INITIALIZER_BYTES


def _with_value_attribute(node: onnx.NodeProto) -> onnx.NodeProto:
    """A Constant node with ``value_ints``/``value_float``/... rewritten to the ``value`` form TVM reads."""
    if node.op_type != "Constant" or any(a.name == "value" for a in node.attribute):
        return node
    import numpy as np

    for attr in node.attribute:
        if attr.name in _CONSTANT_ATTRIBUTES:
            array = np.array(onnx.helper.get_attribute_value(attr), dtype=_CONSTANT_ATTRIBUTES[attr.name])
            fixed = onnx.NodeProto()
            fixed.CopyFrom(node)
            del fixed.attribute[:]
            fixed.attribute.append(onnx.helper.make_attribute("value", onnx.numpy_helper.from_array(array)))
            return fixed
    return node


def _fold_constants(model: onnx.ModelProto, graph: ModelGraph, names: list[str]) -> dict[int, list]:
    """Values of the constant nodes that need no weight bytes, by node index.

    Shape-only subgraphs (``Shape`` of a weight or input -> ``Expand``/``Concat``/``Reshape`` ...) are
    folded by any runtime, but the Relax importer trips on some of them (e.g. ``Expand`` of a ``Shape``
    output). Nodes our graph flags ``constant`` are evaluated here with ONNX's reference evaluator,
    reading only inline initializers, ``Constant`` nodes and static shapes; the importer then sees
    constants. Nodes that need weight values (a transposed weight) are left to LiftTransformParams.
    """
    import numpy as np
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    dag = graph.dag
    opsets = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    known: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if not _is_weight(t)}
    folded: dict[int, list] = {}
    for index, (node, name) in enumerate(zip(model.graph.node, names)):
        data = dag.nodes[name]
        if not data["constant"] or node.domain not in ("", "ai.onnx"):
            continue
        shapes = [t.shape if t is not None else None for t in data["inputs"]]
        try:
            if node.op_type in ("Shape", "Size") and shapes and shapes[0] is not None:
                full = np.array(shapes[0], dtype=np.int64)
                if node.op_type == "Size":
                    values = [np.array(int(np.prod(full)), dtype=np.int64)]
                else:
                    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                    values = [full[attrs.get("start", 0):attrs.get("end")]]
            elif all(t == "" or t in known for t in node.input):
                feeds = {t: known[t] for t in node.input if t}
                values = _evaluate(ReferenceEvaluator, node, feeds, opsets)
            else:
                continue
        except Exception:  # anything the evaluator cannot do is left to TVM
            continue
        if any(not isinstance(v, np.ndarray) or v.nbytes > _FOLD_LIMIT_BYTES for v in values):
            continue
        folded[index] = values
        known.update(zip(node.output, values))
    return folded


def _evaluate(evaluator, node: onnx.NodeProto, feeds: dict[str, Any], opsets: list) -> list:
    """Run one node on numpy inputs."""
    inputs = [onnx.helper.make_tensor_value_info(t, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for t, v in feeds.items()]
    outputs = [onnx.helper.make_empty_tensor_value_info(t) for t in node.output]
    single = onnx.helper.make_graph([node], "fold", inputs, outputs)
    return list(evaluator(onnx.helper.make_model(single, opset_imports=opsets)).run(None, feeds))


class _OneNode:
    """What ``ONNXGraphImporter._construct_nodes`` reads of a graph: its node list."""

    def __init__(self, node: onnx.NodeProto):
        self.node = [node]


def _importer_class():
    from tvm import relax
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter, get_type

    class _TaggingImporter(ONNXGraphImporter):
        """Weights as typed parameter Vars; a marker binding after each converted node."""

        def __init__(self, names: list[str], shape_dict: dict[str, Any], folded: dict[int, list]):
            super().__init__(shape_dict, "float32", keep_params_in_input=False, sanitize=True)
            self._onnx_names = names
            self._folded = folded
            self._weights: dict[str, Any] = {}
            self.failed: tuple[str, str, Exception] | None = None

        def _parse_graph_initializers(self, graph):
            for tensor in graph.initializer:
                if _is_weight(tensor):
                    name = self._sanitize_name(tensor.name.removeprefix("onnx::"))
                    var = self._new_var(name, shape=list(tensor.dims), dtype=get_type(tensor.data_type))
                    self._nodes[tensor.name] = var
                    self._weights[tensor.name] = var
                else:
                    self._nodes[tensor.name] = relax.const(self._parse_array(tensor))

        def _parse_graph_input(self, graph):
            super()._parse_graph_input(graph)
            # Runtime inputs first, weights after them: "num_input" tells LiftTransformParams which are which.
            for name in self._weights:
                self._inputs.pop(name, None)
            self._inputs.update(self._weights)

        def _construct_nodes(self, graph):
            for index, node in enumerate(graph.node):
                if index in self._folded:  # a constant we computed: no binding, like a folded node
                    for output, value in zip(node.output, self._folded[index]):
                        self._nodes[output] = relax.const(value)
                    continue
                try:
                    super()._construct_nodes(_OneNode(_with_value_attribute(node)))
                except Exception as exc:
                    self.failed = (self._onnx_names[index], node.op_type, exc)
                    raise
                for output in node.output:
                    expr = self._nodes.get(output)
                    if isinstance(expr, (relax.Call, relax.TupleGetItem)) and isinstance(expr.ty, relax.TensorType):
                        self._nodes[output] = self.bb.emit(expr)
                self.bb.emit(relax.prim_value(index), name_hint=_MARKER)

    return _TaggingImporter


def _import(model: onnx.ModelProto, names: list[str], shapes: dict[str, Any], folded: dict[int, list] | None = None):
    """The Relax module of ``model`` and, for each relax Var bound in ``main``, its ONNX node index."""
    from tvm import relax

    importer = _importer_class()(names, shapes, folded or {})
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            mod = importer.from_onnx(model.graph, _default_opset(model))
    except Exception as exc:
        if importer.failed is None:
            raise
        name, op, error = importer.failed
        message = str(error).strip().splitlines()
        raise LilouInputError(f"TVM cannot import node {name!r} ({op}): "
                              f"{message[-1] if message else type(error).__name__}") from exc

    tags: dict[Any, int] = {}
    pending: list[Any] = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if binding.var.name == _MARKER or binding.var.name.startswith(_MARKER):
                index = int(binding.value.value)
                for var in pending:
                    tags[var] = index
                pending = []
            else:
                pending.append(binding.var)
    for binding in _bindings(mod["main"]):  # the graph outputs alias a node's Var after the last marker
        if binding.var not in tags and isinstance(binding.value, relax.Var) and binding.value in tags:
            tags[binding.var] = tags[binding.value]
    mod = relax.transform.DeadCodeElimination()(mod)
    return mod, tags


# --- passes and kernels --------------------------------------------------------------------------


def _kernels(mod, tags: dict[Any, int]) -> tuple[list[set[int]], int]:
    """ONNX node indices of each kernel of ``main`` in TVM's order, and how many kernels had no tag."""
    import tvm
    from tvm import relax

    with tvm.target.Target(TARGET), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # LiftTransformParams copies main with fresh Vars of the same names (unique: one BlockBuilder made
        # them all), so the tags move over by name; LegalizeOps and FoldConstant keep the Var objects.
        by_name = {var.name: node for var, node in tags.items()}
        mod = relax.transform.LiftTransformParams()(mod)
        tags = {b.var: by_name[b.var.name] for b in _bindings(mod["main"]) if b.var.name in by_name}
        pre = tvm.transform.Sequential([
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
        ])(mod)
        fused = relax.transform.FuseOps()(pre)
        final = tvm.transform.Sequential([relax.transform.FuseTIR(), relax.transform.RewriteDataflowReshape()])(fused)

    members = _fused_members(pre["main"], fused)
    kernels: list[set[int]] = []
    untagged = 0
    for binding in _bindings(final["main"]):  # FuseTIR keeps main's binding Vars
        if _launches(binding.value, final):
            nodes = {tags[v] for v in members.get(binding.var, ()) if v in tags}
            if nodes:
                kernels.append(nodes)
            else:
                untagged += 1
    return kernels, untagged


def _bindings(func) -> list:
    return [binding for block in func.body.blocks for binding in block.bindings]


def _fused_members(pre_main, fused_mod) -> dict[Any, list]:
    """For each binding Var of the fused ``main``: the Vars of ``pre_main`` (before FuseOps) it computes.

    FuseOps gives main fresh Vars and structurally equal fused functions are shared, so the bindings inside
    a fused function cannot be looked up by identity. Instead each fused call is replayed: its parameters
    are bound to the pre-FuseOps values of its arguments and each inner binding is matched to the
    pre-FuseOps binding with the same operator and the same (matched) arguments.
    """
    import tvm
    import tvm_ffi
    from tvm import relax

    def key(expr, env: dict) -> Any:
        if isinstance(expr, relax.Var):
            return env.get(expr, ("unknown", expr.name))
        if isinstance(expr, relax.Call):
            op = expr.op.name if isinstance(expr.op, tvm.ir.Op) else (
                expr.op.name_hint if isinstance(expr.op, tvm.ir.GlobalVar) else key(expr.op, env))
            return ("call", op, tuple(key(a, env) for a in expr.args))
        if isinstance(expr, relax.Tuple):
            return ("tuple", tuple(key(f, env) for f in expr.fields))
        if isinstance(expr, relax.TupleGetItem):
            return ("item", key(expr.tuple_value, env), expr.index)
        if isinstance(expr, tvm.ir.GlobalVar):
            return ("global", expr.name_hint)
        return ("expr", tvm_ffi.structural_hash(expr))

    # Value numbering: bindings that compute the same expression of the same values share an id, so a
    # duplicated computation (sigmoid(x) written twice) does not break the matching of what uses it.
    ids: dict[Any, int] = {}
    pre_env: dict[Any, Any] = {}
    for param in pre_main.params:
        pre_env[param] = ("id", ids.setdefault(("param", param), len(ids)))
    candidates: dict[Any, list[Any]] = {}
    readers: dict[Any, set] = {}   # pre Var -> keys of the bindings that read it
    for binding in _bindings(pre_main):
        value_key = key(binding.value, pre_env)
        candidates.setdefault(value_key, []).append(binding.var)
        for var in _free_vars(binding.value):
            readers.setdefault(var, set()).add(value_key)
        pre_env[binding.var] = ("id", ids.setdefault(value_key, len(ids)))

    def match(expr, env: dict, later: frozenset = frozenset(), name: str = "") -> Any:
        """The pre-FuseOps binding Var that computes ``expr`` (consumed once matched), or None.

        Among duplicates, the one read by a binding of ``later`` (keys computed further on in the same
        fused function) is the one this function computes; then the one of the same name (FuseOps keeps
        the names of the bindings it leaves alone).
        """
        found = candidates.get(key(expr, env))
        if not found:
            return None
        chosen = next((v for v in found if readers.get(v, set()) & later),
                      next((v for v in found if v.name == name), found[0]))
        found.remove(chosen)
        return chosen

    fused_main = fused_mod["main"]
    env: dict[Any, Any] = {q: pre_env[p] for p, q in zip(pre_main.params, fused_main.params)}
    tuple_env: dict[Any, list] = {}   # fused call Var -> pre ids of its tuple outputs
    members: dict[Any, list] = {}
    for binding in _bindings(fused_main):
        var, value = binding.var, binding.value
        func = fused_mod[value.op] if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) else None
        if isinstance(func, relax.Function):
            inner = {p: key(a, env) for p, a in zip(func.params, value.args)}
            inner_keys = []
            for b in _bindings(func):  # ids follow from keys alone (value numbering): no matching needed yet
                inner_keys.append(key(b.value, inner))
                if inner_keys[-1] in ids:
                    inner[b.var] = ("id", ids[inner_keys[-1]])
            computed: list[Any] = []
            for i, b in enumerate(_bindings(func)):
                found = match(b.value, inner, frozenset(inner_keys[i + 1:]), b.var.name)
                if found is not None:
                    computed.append(found)
            members[var] = computed
            out = func.body.body
            if isinstance(out, relax.Tuple):
                tuple_env[var] = [inner.get(f) for f in out.fields]
            elif isinstance(out, relax.Var) and out in inner:
                env[var] = inner[out]
            continue
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in tuple_env:
            outputs = tuple_env[value.tuple_value]
            if value.index < len(outputs) and outputs[value.index] is not None:
                env[var] = outputs[value.index]
            continue
        found = match(value, env, name=var.name)
        if found is not None:
            env[var] = pre_env[found]
            members[var] = [found]
    return members


def _free_vars(expr) -> list:
    """Relax Vars an expression reads (through tuples and tuple items)."""
    from tvm import relax

    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Call):
        return [v for a in expr.args for v in _free_vars(a)]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in _free_vars(f)]
    if isinstance(expr, relax.TupleGetItem):
        return _free_vars(expr.tuple_value)
    return []


def _launches(value, mod) -> bool:
    """Is this binding of ``main`` a kernel launch (after FuseTIR)?"""
    import tvm
    from tvm import relax

    if not isinstance(value, relax.Call):
        return False
    if isinstance(value.op, tvm.ir.Op):
        return value.op.name in _KERNEL_CALLS
    if isinstance(value.op, tvm.ir.GlobalVar):  # a primitive function FuseTIR left as a call
        func = mod[value.op]
        return not isinstance(func, relax.Function) or bool(func.attrs and "Primitive" in func.attrs)
    return False


# --- kernels -> partition ------------------------------------------------------------------------


def _to_partition(graph: ModelGraph, names: list[str], kernels: list[set[int]], untagged: int
                  ) -> tuple[Partition, TvmFusionStats]:
    dag = graph.dag
    runtime = graph.runtime_nodes()
    index = {n: i for i, n in enumerate(runtime)}
    stats = TvmFusionStats(kernels_tvm=len(kernels) + untagged, untagged_kernels=untagged)

    # Kernels as bitsets over runtime nodes; weight-only ones would have been folded.
    members: list[int] = []
    for kernel in kernels:
        bits = 0
        for i in kernel:
            if names[i] in index:
                bits |= 1 << index[names[i]]
        if bits:
            members.append(bits)
        else:
            stats.weight_only_kernels += 1

    # Union-find: kernels sharing an ONNX node become one group.
    parent = list(range(len(members)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[int, int] = {}
    split: set[int] = set()
    for k, bits in enumerate(members):
        for i in _bits(bits):
            if i in owner:
                split.add(i)
                a, b = find(owner[i]), find(k)
                if a != b:
                    parent[b] = a
                    stats.kernels_merged += 1
            else:
                owner[i] = k
    stats.split_nodes = [runtime[i] for i in sorted(split)]
    groups: dict[int, int] = {}
    for k, bits in enumerate(members):
        root = find(k)
        groups[root] = groups.get(root, 0) | bits

    # Convexity: a node on a path between two members joins the group (with its own kernel, if any).
    ancestors = [0] * len(runtime)
    descendants = [0] * len(runtime)
    for n in runtime:
        for p in dag.predecessors(n):
            if p in index:
                ancestors[index[n]] |= ancestors[index[p]] | (1 << index[p])
    for n in reversed(runtime):
        for s in dag.successors(n):
            if s in index:
                descendants[index[n]] |= descendants[index[s]] | (1 << index[s])
    changed = True
    while changed:
        changed = False
        for root in list(groups):
            if root not in groups:
                continue
            bits = groups[root]
            anc = desc = 0
            for i in _bits(bits):
                anc |= ancestors[i]
                desc |= descendants[i]
            inside = anc & desc & ~bits
            if not inside:
                continue
            changed = True
            for i in _bits(inside):
                other = find(owner[i]) if i in owner else None
                if other is not None and other != root and other in groups:
                    parent[other] = root
                    groups[root] |= groups.pop(other)
                    stats.kernels_merged += 1
                    stats.convexity_merges += 1
                else:
                    groups[root] |= 1 << i
                    owner[i] = root
                    stats.absorbed_nodes += 1

    in_kernel = set()
    for bits in groups.values():
        in_kernel.update(_bits(bits))
    ordered = sorted(groups.values(), key=lambda bits: (bits & -bits).bit_length())
    partition = partition_from_groups(graph, ([runtime[i] for i in _bits(bits)] for bits in ordered), BACKEND)
    launched = {runtime[i] for i in in_kernel}
    for g, group in enumerate(partition.groups):
        if group.reason == "constant":
            continue
        launches = any(n in launched for n in group.nodes)
        if launches != group.launches:
            partition.groups[g] = replace(group, launches=launches, reason="" if launches else "view")
    stats.kernels = len(partition.kernels)
    stats.no_kernel_groups = len(partition.groups) - stats.kernels
    if stats.split_nodes:
        partition.warnings.append(
            f"TVM computes {len(stats.split_nodes)} ONNX node(s) in several kernels (e.g. {stats.split_nodes[0]!r}); "
            "each such node's kernels are counted as one group")
    if untagged or stats.weight_only_kernels:
        partition.warnings.append(f"{untagged} TVM kernel(s) map to no ONNX node and {stats.weight_only_kernels} "
                                  "only to weight-only nodes; they are left out")
    return partition, stats


def _bits(value: int) -> Iterable[int]:
    while value:
        low = value & -value
        yield low.bit_length() - 1
        value ^= low
