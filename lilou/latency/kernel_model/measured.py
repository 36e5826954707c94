"""FLOPs and bytes of measured NeuSight calls, from the ONNX nodes that express the same PyTorch call.

A measured row and an ONNX node of the same shapes get identical numbers: both go through
:func:`lilou.graph.costs.node_cost` (and :func:`lilou.latency.kernel_model.kernel.describe_kernel` for what
one kernel reads and writes). This lives in the latency stage, not in ``lilou.data``, so the
data layer stays a leaf.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lilou.data.neusight import BINARY_OPS, OPS, SCALAR_OPS, SHAPE_COLUMNS, KernelTable
from lilou.errors import LilouInputError
from lilou.graph.costs import CostInput, NodeCost, TensorInfo
from lilou.latency.kernel_model.kernel import describe_kernel

def _tensor(name: str, shape: Sequence[int]) -> TensorInfo:
    return TensorInfo(name, tuple(int(d) for d in shape), "float32", 4)


def cost_nodes(op: str, shape: dict[str, int]) -> list[CostInput]:
    """The ONNX nodes (FP32) that compute what one NeuSight row measured."""
    if op not in OPS:
        raise LilouInputError(f"unknown NeuSight op {op!r}; known: {', '.join(OPS)}")
    family, onnx_op = OPS[op]
    if op == "linear":  # x @ W^T + b: MatMul then Add of the bias, as ONNX exporters write a 3-D Linear
        b, m, n, k = shape["B"], shape["M"], shape["N"], shape["K"]
        product = _tensor("matmul_out", (b, m, k))
        return [CostInput("MatMul", {}, [_tensor("x", (b, m, n)), _tensor("weight", (n, k))], [product]),
                CostInput("Add", {}, [product, _tensor("bias", (k,))], [_tensor("y", (b, m, k))])]
    if op == "bmm":
        b, m, n, k = shape["B"], shape["M"], shape["N"], shape["K"]
        return [CostInput("MatMul", {}, [_tensor("a", (b, m, n)), _tensor("b", (b, n, k))],
                          [_tensor("y", (b, m, k))])]
    if op == "conv":
        b, cin, cout = shape["B"], shape["C_in"], shape["C_out"]
        k, size, stride, pad = shape["kernel_size"], shape["input_size"], shape["stride"], shape["padding"]
        out = (size + 2 * pad - k) // stride + 1
        attributes = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
        return [CostInput("Conv", attributes, [_tensor("x", (b, cin, size, size)), _tensor("weight", (cout, cin, k, k))],
                          [_tensor("y", (b, cout, out, out))])]
    x, y = _tensor("x", (shape["B"], shape["H"])), _tensor("y", (shape["B"], shape["H"]))
    if op in BINARY_OPS:
        return [CostInput(onnx_op, {}, [x, _tensor("other", (shape["B"], shape["H"]))], [y])]
    if op in SCALAR_OPS:  # the Python scalar becomes a 0-d constant in ONNX
        return [CostInput(onnx_op, {}, [x, _tensor("scalar", ())], [y])]
    if op == "ln":
        h = shape["H"]
        return [CostInput("LayerNormalization", {"axis": -1, "epsilon": 1e-5},
                          [x, _tensor("scale", (h,)), _tensor("bias", (h,))], [y])]
    if op == "softmax":
        return [CostInput("Softmax", {"axis": -1}, [x], [y])]
    return [CostInput(onnx_op, {}, [x], [y])]  # relu, gelu, tanh


def kernel_cost(op: str, shape: dict[str, int]) -> NodeCost:
    """FLOPs and bytes of one measured call, counted as **one kernel**.

    FLOPs are the sum over :func:`cost_nodes`. Bytes are those of the tensors that
    cross the group's boundary: for ``linear`` (cuBLAS applies the bias in the GEMM
    epilogue) that is input, weight and bias read and the output written; the
    MatMul's intermediate result is neither written nor read again.
    """
    spec = describe_kernel(cost_nodes(op, shape))
    return NodeCost(flops=spec.flops, bytes_read=spec.bytes_read, bytes_written=spec.bytes_written)


def table_costs(table: KernelTable) -> np.ndarray:
    """(n, 3) int64 FLOPs, bytes read, bytes written of every row; one cost per distinct (op, shape)."""
    cache: dict[tuple, tuple[int, int, int]] = {}
    out = np.zeros((len(table), 3), dtype=np.int64)
    for i in range(len(table)):
        op, family = str(table.op[i]), str(table.family[i])
        shape = {key: int(table.shape[key][i]) for key in SHAPE_COLUMNS[family].values()}
        signature = (op, *shape.values())
        if signature not in cache:
            cost = kernel_cost(op, shape)
            cache[signature] = (cost.flops, cost.bytes_read, cost.bytes_written)
        out[i] = cache[signature]
    return out
