"""TensorRT's FP8 quantize/dequantize custom ops written as ONNX's own, so a ModelOpt FP8 export reads as FP8.

NVIDIA's ModelOpt (``modelopt.torch.quantization`` with ``FP8_DEFAULT_CFG``, then ``torch.onnx.export``) writes
each FP8 quantizer as ``trt::TRT_FP8QuantizeLinear(x, scale)`` and ``trt::TRT_FP8DequantizeLinear(q, scale)``:
TensorRT plugins, unknown to ONNX (every shape after them unknown, each priced as a fallback kernel, the GEMMs
between them in FP32). They mean ONNX's ``QuantizeLinear`` to FLOAT8E4M3FN (zero point 0, saturating) and
``DequantizeLinear``; ModelOpt's own ONNX post-processing (``FP8QuantExporter``) renames them so. The same is done
here before :mod:`lilou.graph.quantized` reads the graph as the FP8 model it describes; the file's opset is raised
to 19 (FP8 types in Q/DQ) where its ops mean the same there, else the ops stay, named unsupported.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from lilou.graph.opset_upgrade import can_raise, raise_opset

#: The domain ModelOpt's TensorRT ops are written in, and the opset whose Q/DQ take FP8.
DOMAIN, FP8_OPSET = "trt", 19
_QUANTIZE, _DEQUANTIZE = "TRT_FP8QuantizeLinear", "TRT_FP8DequantizeLinear"


def standard_fp8_qdq(model: onnx.ModelProto) -> int:
    """Rewrite the FP8 quantize/dequantize pairs in place (see the module docstring); how many nodes."""
    nodes = [n for n in model.graph.node if n.domain == DOMAIN and n.op_type in (_QUANTIZE, _DEQUANTIZE)
             and len(n.input) == 2 and all(n.input) and len(n.output) == 1 and n.output[0]]
    if not nodes or not can_raise(model, FP8_OPSET):
        return 0
    raise_opset(model, FP8_OPSET)
    graph = model.graph
    written = set()
    for node in nodes:
        node.domain = ""
        if node.op_type == _QUANTIZE:
            node.op_type = "QuantizeLinear"
            zero = f"{node.output[0]}/lilou_fp8_zero_point"
            graph.initializer.append(helper.make_tensor(zero, TensorProto.FLOAT8E4M3FN, [], [0.0]))
            node.input.append(zero)
            node.attribute.append(helper.make_attribute("saturate", 1))
        else:
            node.op_type = "DequantizeLinear"
        written.add(node.output[0])
    # the exporter typed the quantized tensors as uint8 (the plugin's storage): ONNX's inference gives them anew
    stale = [v for v in graph.value_info if v.name in written]
    for value in stale:
        graph.value_info.remove(value)
    if not any(n.domain == DOMAIN for n in graph.node):  # the plugin domain is no longer used
        for entry in [o for o in model.opset_import if o.domain == DOMAIN]:
            model.opset_import.remove(entry)
    return len(nodes)
