"""TVM's FuseOps algorithm replayed on the ONNX graph: a compiler prior for the fusion GNN.

TVM (Relax) fuses by operator pattern and the post-dominator tree
(``src/relax/analysis/graph_partitioner.cc``): an anchor (conv, matmul, pool,
softmax, layer norm: ``OUT_EWISE_FUSABLE``) takes its elementwise post-dominator
in phase 0; elementwise/broadcast nodes join an injective or reduction
post-dominator whose path stays injective; injective nodes (reshape, transpose,
batch norm as Relax legalises it) join in phase 1 only when the post-dominator's
group is itself injective, so a batch norm never joins a pool-anchored sum. Whether
an edge fuses therefore depends on the whole neighbourhood, which a few rounds of
message passing approximate poorly on families not seen in training.

This module runs the same algorithm on the ONNX DAG, one node per ONNX node, with
each op's pattern from :data:`TVM_PATTERNS` (measured: the ``op_pattern`` that
LegalizeOps + AnnotateTIROpPattern give the prim functions each ONNX op becomes).
Nodes the importer emits nothing for (Identity, Dropout, Shape) are passed
through. It is an approximation (one pattern per ONNX node, no tuples, no argument
limit) used as a *feature*, not as the prediction: the GNN learns where it is wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lilou.fusion.partition import Edge, Partition, partition_from_group_ids, runtime_edges
from lilou.graph.dag import ModelGraph

# tvm.relax OpPatternKind values.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8
PATTERN_NAMES: dict[int, str] = {ELEMWISE: "elemwise", BROADCAST: "broadcast", INJECTIVE: "injective",
                                 COMM_REDUCE: "comm_reduce", OUT_EWISE_FUSABLE: "out_ewise_fusable",
                                 OPAQUE: "opaque"}
MAX_FUSED_OPS = 256  # TVM's default max_fuse_depth

_ELEMWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Erf", "Gelu", "Relu", "Sigmoid", "Tanh",
             "Cast", "CastLike", "Clip", "HardSwish", "HardSigmoid", "Where", "Neg", "Exp", "Log", "Abs", "Min",
             "Max", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
             "Softplus", "LeakyRelu", "Elu", "Selu", "PRelu", "Sign", "Floor", "Ceil", "Round", "Mod", "Sin", "Cos",
             "IsNaN", "IsInf", "Mish", "BitShift")
_INJECTIVE = ("BatchNormalization", "Reshape", "Transpose", "Concat", "Flatten", "Slice", "Resize", "Squeeze",
              "Unsqueeze", "Expand", "Split", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "Trilu", "Range",
              "ConstantOfShape", "GatherElements")
_OUT_EWISE_FUSABLE = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LayerNormalization", "Softmax",
                      "LogSoftmax", "ReduceMean", "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool",
                      "InstanceNormalization", "GroupNormalization")
_COMM_REDUCE = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ArgMax", "ArgMin",
                "ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")  # measured 2026-12-02: a sum
#: ONNX op -> TVM pattern; ``None``: the importer emits no computation. Ops not listed are opaque.
TVM_PATTERNS: dict[str, int | None] = {
    **{op: ELEMWISE for op in _ELEMWISE},
    **{op: INJECTIVE for op in _INJECTIVE},
    **{op: OUT_EWISE_FUSABLE for op in _OUT_EWISE_FUSABLE},
    **{op: COMM_REDUCE for op in _COMM_REDUCE},
    **{op: None for op in ("Identity", "Dropout", "Shape", "Size", "Constant", "SequenceAt",
                           "SplitToSequence", "Optional", "OptionalGetElement")},
}


def tvm_pattern(op: str, attributes: dict | None = None) -> int | None:
    """TVM's pattern for an ONNX node (``None``: no computation). A constant-mode Pad is elementwise."""
    if op == "Pad" and (attributes or {}).get("mode", "constant") in ("constant", b"constant"):
        return ELEMWISE
    return TVM_PATTERNS.get(op, OPAQUE)


@dataclass(eq=False)
class _DomNode:
    name: str
    depth: int = 1
    parent: _DomNode | None = None
    pattern: int = ELEMWISE


@dataclass(eq=False)
class _Group:
    pattern: int
    anchor: bool
    num_nodes: int = 1
    parent: _Group | None = None

    def root(self) -> _Group:
        group = self
        while group.parent is not None:
            group = group.parent
        node = self
        while node.parent is not None and node.parent is not group:  # path compression
            node.parent, node = group, node.parent
        return group


@dataclass
class _Graph:
    order: list[str]                                  # topological, producers first
    pattern: dict[str, int]
    outputs: dict[str, list[tuple[str, int]]]         # consumer and edge pattern (the consumer's pattern)
    extern: set[str] = field(default_factory=set)     # nodes whose value leaves the function


def _pre_op_slots(data: dict) -> tuple[int, ...]:
    """Input slots the importer routes through an elementwise op of its own before the main computation.

    A SAME-padded conv or pool gets an explicit pad; Gather normalises negative indices. TVM may fuse
    that op with its producer, and the oracle then joins the producer to this node's group.
    """
    attrs = data["attributes"]
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER", b"SAME_UPPER", b"SAME_LOWER"):
        return (0,)
    return (1,) if data["op"] == "Gather" else ()


#: Ops TVM 0.27's importer computes as a reduction followed by an elementwise op of their own (ReduceL2:
#: sum of squares, then sqrt; ReduceLogSum(Exp): then log), measured with LegalizeOps + FuseOps on one node
#: followed by a Clip: the elementwise tail fuses with the reader, the reduction does not. ReduceL1 and
#: ReduceSumSquare end in the reduction itself (their reader stays a kernel of its own).
_REDUCTION_THEN_ELEMENTWISE = frozenset({"ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})


def _compute_graph(graph: ModelGraph) -> tuple[_Graph, dict[str, str]]:
    """The replay graph and, for each pre- or post-op node it adds, the ONNX node it belongs to."""
    dag = graph.dag
    nodes = graph.runtime_nodes()
    pattern = {n: tvm_pattern(dag.nodes[n]["op"], dag.nodes[n]["attributes"]) for n in nodes}
    extra_ops: dict[str, str] = {}
    slot_owner: dict[tuple[str, str], str] = {}  # (ONNX node, input tensor) -> its pre-op node
    post_op: dict[str, str] = {}                 # ONNX node -> its elementwise tail
    order: list[str] = []
    for n in nodes:
        if pattern[n] is None:
            continue
        inputs = dag.nodes[n]["inputs"]
        for slot in _pre_op_slots(dag.nodes[n]):
            if slot < len(inputs) and inputs[slot] is not None:
                pre = f"{n}#pre{slot}"
                extra_ops[pre] = n
                pattern[pre] = ELEMWISE
                slot_owner[(n, inputs[slot].name)] = pre
                order.append(pre)
        order.append(n)
        if dag.nodes[n]["op"] in _REDUCTION_THEN_ELEMENTWISE:
            post = post_op[n] = f"{n}#post"
            extra_ops[post] = n
            pattern[post] = ELEMWISE
            order.append(post)
    graph_outputs = {t.name for t in graph.outputs}

    def consumers(node: str) -> list[str]:
        """Computing readers of ``node`` (or of the pre-op they route it through), past pass-through nodes, in
        depth-first order. Walked with a stack, as the two walks below: hundreds of pass-through nodes in a row
        overflowed Python's recursion limit."""
        found: list[str] = []
        seen: set[str] = set()
        path, pending = [node], [iter(dag.successors(node))]
        while pending:
            succ = next(pending[-1], None)
            if succ is None:
                path.pop()
                pending.pop()
                continue
            if dag.nodes[succ]["constant"] or succ in seen:
                continue
            seen.add(succ)
            if pattern.get(succ) is None:
                path.append(succ)
                pending.append(iter(dag.successors(succ)))
                continue
            tensors = dag.edges[path[-1], succ]["tensors"]
            routed = {slot_owner[(succ, t)] for t in tensors if (succ, t) in slot_owner}
            found.extend(sorted(routed) + ([succ] if len(routed) < len(tensors) else []))
        return found

    def reaches_output(node: str) -> bool:
        """Whether ``node`` writes a graph output, itself or through pass-through nodes."""
        stack, seen = [node], {node}
        while stack:
            current = stack.pop()
            if any(t.name in graph_outputs for t in dag.nodes[current]["outputs"]):
                return True
            for succ in dag.successors(current):
                if succ not in seen and not dag.nodes[succ]["constant"] and pattern.get(succ, 0) is None:
                    seen.add(succ)
                    stack.append(succ)
        return False

    outputs = {n: [(c, pattern[c]) for c in consumers(n)] for n in order if n not in extra_ops}
    extern = {n for n in order if n not in extra_ops and reaches_output(n)}
    for n, post in post_op.items():  # the tail computes what the node's readers read
        outputs[post], outputs[n] = outputs[n], [(post, ELEMWISE)]
        if n in extern:
            extern.discard(n)
            extern.add(post)
    pre_ops = {extra: owner for extra, owner in extra_ops.items() if extra not in post_op.values()}
    outputs.update({pre: [(owner, pattern[owner])] for pre, owner in pre_ops.items()})  # a pre-op feeds its node
    return _Graph(order, {n: pattern[n] for n in order}, outputs, extern), extra_ops


def _post_dominator_tree(g: _Graph) -> dict[str, _DomNode]:
    tree: dict[str, _DomNode] = {}

    def lca(lhs: _DomNode | None, rhs: _DomNode | None, pattern: int) -> tuple[_DomNode | None, int]:
        while lhs is not rhs:
            if lhs is None or rhs is None:
                return None, pattern
            if lhs.depth < rhs.depth:
                pattern, rhs = max(pattern, rhs.pattern), rhs.parent
            elif rhs.depth < lhs.depth:
                pattern, lhs = max(pattern, lhs.pattern), lhs.parent
            else:
                pattern = max(pattern, lhs.pattern, rhs.pattern)
                lhs, rhs = lhs.parent, rhs.parent
        return lhs, pattern

    for name in reversed(g.order):
        if name in g.extern:
            tree[name] = _DomNode(name, 1, None, OPAQUE)
            continue
        outs = g.outputs[name]
        if not outs:
            tree[name] = _DomNode(name, 1, None, ELEMWISE)
            continue
        parent, pattern = tree[outs[0][0]], max(ELEMWISE, outs[0][1])
        for consumer, edge_pattern in outs[1:]:
            parent, pattern = lca(parent, tree[consumer], pattern)
            pattern = max(pattern, edge_pattern)
        tree[name] = _DomNode(name, parent.depth + 1 if parent else 1, parent, pattern)
    return tree


def _broadcast_path(kind: int, is_sink: bool) -> bool:
    return kind <= BROADCAST


def _injective_path(kind: int, is_sink: bool) -> bool:
    return kind <= INJECTIVE


def _into_any_fusable_sink(kind: int, is_sink: bool) -> bool:
    if not is_sink:
        return kind <= INJECTIVE
    return kind <= BROADCAST or kind in (COMM_REDUCE, INJECTIVE, OUT_EWISE_FUSABLE)


def _path_rule(pattern: int, dom_pattern: int, phase: int):
    """TVM's test for fusing a node into its post-dominator: the condition each group on the way (and the
    sink's) must meet, or ``None`` when this phase does not try (graph_partitioner.cc, RunFuse)."""
    if pattern == OUT_EWISE_FUSABLE:  # conv, matmul...: take an elementwise tail, first phase only
        return _broadcast_path if phase == 0 and dom_pattern == ELEMWISE else None
    if pattern <= BROADCAST:
        return _into_any_fusable_sink if dom_pattern <= INJECTIVE or dom_pattern == COMM_REDUCE else None
    if pattern == INJECTIVE:  # deferred to the second phase, so anchors finish fusing first
        return _injective_path if phase == 1 else None
    return None  # a reduction fuses nothing into what follows


def replay_tvm_fusion(graph: ModelGraph) -> dict[str, int]:
    """Group id per runtime node, as TVM's FuseOps would group them (approximately).

    Pass-through nodes get a group only when they sit between two members of one.
    """
    g, extra_ops = _compute_graph(graph)
    tree = _post_dominator_tree(g)
    groups = {n: _Group(g.pattern[n], g.pattern[n] == OUT_EWISE_FUSABLE) for n in g.order}

    def downstream(src: str, sink: str) -> list[str]:
        """Nodes on the paths from ``src`` (excluded) to its post-dominator ``sink`` (included).

        Iterative: a node feeding a graph output can have the output as post-dominator, thousands of
        nodes away, which would overflow Python's recursion limit.
        """
        seen: set[str] = set()
        stack = [c for c, _ in g.outputs[src]]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node != sink:
                stack.extend(c for c, _ in g.outputs[node])
        return list(seen)

    def merge(child: _Group, parent: _Group) -> None:
        child, parent = child.root(), parent.root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        child.parent = parent
        if child.anchor:
            parent.anchor = True
            parent.pattern = max(child.pattern, parent.pattern)

    for phase in (0, 1):  # phase 2 fuses into tuples, which this graph has none of
        for name in g.order:
            group, dom = groups[name], tree[name]
            if group.pattern == OPAQUE or dom.parent is None:
                continue
            sink = dom.parent.name
            rule = _path_rule(group.pattern, dom.pattern, phase)
            if rule is None or group.root() is groups[sink].root():
                continue
            between = downstream(name, sink)  # the paths TVM checks (CheckPath) and fuses (CommitFuse)
            inside = [name, *(n for n in between if n != sink)]
            if groups[sink].root().num_nodes + sum(groups[n].num_nodes for n in inside) > MAX_FUSED_OPS:
                continue
            if all(rule(groups[n].root().pattern, n == sink) for n in between):
                for node in inside:
                    merge(groups[node], groups[sink])
    for extra, owner in extra_ops.items():  # an ONNX node computed in two groups counts as one group
        merge(groups[extra], groups[owner])
    roots: dict[int, int] = {}
    assigned = {n: roots.setdefault(id(groups[n].root()), len(roots)) for n in g.order if n not in extra_ops}
    _absorb_pass_through(graph, assigned)
    return assigned


def _absorb_pass_through(graph: ModelGraph, assigned: dict[str, int]) -> None:
    """A pass-through node between two members of one group joins it, as the oracle's convex closure does."""
    dag = graph.dag
    runtime = [n for n in graph.runtime_nodes() if n not in assigned]

    def reach(node: str, step) -> set[int]:
        """The groups first met walking from ``node`` through unassigned nodes (a stack, not recursion: 400
        pass-through nodes in a row overflowed Python's)."""
        found: set[int] = set()
        seen: set[str] = set()
        stack = [node]
        while stack:
            for other in step(stack.pop()):
                if dag.nodes[other]["constant"] or other in seen:
                    continue
                seen.add(other)
                if other in assigned:
                    found.add(assigned[other])
                else:
                    stack.append(other)
        return found

    for node in runtime:
        common = reach(node, dag.predecessors) & reach(node, dag.successors)
        if common:
            assigned[node] = min(common)


def replayed_fused_edges(graph: ModelGraph) -> dict[Edge, bool]:
    """For each runtime edge: does the FuseOps replay put both ends in one group?"""
    group = replay_tvm_fusion(graph)
    return {(u, v): u in group and v in group and group[u] == group[v] for u, v in runtime_edges(graph)}


def replay_partition(graph: ModelGraph) -> Partition:
    """The replay as kernel groups (a baseline beside the GNN in ``make bench-fusion``)."""
    return partition_from_group_ids(graph, replay_tvm_fusion(graph), "tvm", source="tvm-replay")
