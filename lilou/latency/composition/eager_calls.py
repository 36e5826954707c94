"""The kernels an eager aten call launches beyond the one its kernel group describes.

A kernel group (:mod:`lilou.fusion.partition`) is the ONNX nodes of one launch. Two aten calls launch more than one
kernel for what their ONNX nodes express as one group, and the fusion model, its eager replay and the eager oracle
all group by aten call, so the extra launches are added here, when the groups are described (eager backend only;
the groups, and so the GNN's edge labels and ``lilou fuse``, are unchanged). Each extra kernel lists the nodes of the
call that launches it and says which part of the call it runs (:attr:`KernelSpec.role`).

* A convolution with a bias that cuDNN runs. ``at::_convolution`` (aten/src/ATen/native/Convolution.cpp, the
  ``ConvBackend::Cudnn`` and ``ConvBackend::CudnnTranspose`` cases) calls ``at::cudnn_convolution`` (which takes no
  bias) and then ``output.add_(reshape_bias(input.dim(), bias))``: a second, element-wise kernel that reads the
  output and the bias and writes the output. A depthwise convolution that PyTorch runs in its own kernel
  (``ConvBackend::CudaDepthwise2d``/``3d``: FP32, or FP16 outside cuDNN's depthwise heuristics) takes the bias
  inside. The measured convolutions were all timed without a bias (NeuSight's ``nn.Conv2d(bias=False)`` rows,
  DeepBench's bare ``cudnnConvolutionForward``), so the add is not in their price. A bias that is a folded batch
  norm's shift is removed where the batch norm is restored (:mod:`lilou.graph.folded_norms`): it gets no add.
* A group norm (``aten.native_group_norm``; TorchScript and dynamo write it as Reshape, InstanceNormalization,
  Reshape [, Mul, Add]; ONNX's GroupNormalization). ``GroupNormKernelImplInternal``
  (aten/src/ATen/native/cuda/group_norm_kernel.cu) launches ``RowwiseMomentsCUDAKernel`` (mean and 1/std of the
  N x G rows: a read of X), then with a weight or bias and more than one element per channel
  ``ComputeFusedParamsCUDAKernel`` (per-(n, c) scale and shift, N x C values in FP32), then one TensorIterator
  kernel (read X, write Y): three kernels, X read twice. Without weight and bias, or with one element per channel
  (``GroupNorm1dForward``), the apply kernel reads the moments itself: two kernels.
* An instance norm (``aten.instance_norm``, aten/src/ATen/native/Normalization.cpp): ``weight.repeat(b)`` and
  ``bias.repeat(b)`` (a copy kernel each, where the norm is affine), then ``at::batch_norm`` in training mode on the
  input viewed as (1, N x C, ...). ``_select_batch_norm_backend`` hands that to cuDNN only with a weight and a bias
  that are not BF16 and an input that is not FP16/BF16 beside them (ONNX gives scale and input one type: FP32 or
  FP64 affine norms): one ``cudnnBatchNormalizationForwardTraining`` call, the group's own kernel (what cuDNN
  launches inside is not in PyTorch's source). Otherwise ``batch_norm_cuda_out`` (aten/src/ATen/native/cuda/
  Normalization.cu) launches ``batch_norm_mean_var`` (the statistics of the N x C rows), ``batch_norm_calc_invstd``
  (1/std of N x C values) and ``batch_norm_elementwise`` (read X, write Y): three kernels. An exporter writes the
  scale and bias of a norm without weights as constants (TorchScript) or computed ones (dynamo), and a module's
  weight and bias as initializers: an initializer scale is an affine norm.
* ``torch.nonzero`` (``nonzero_cuda_out_impl``, aten/src/ATen/native/cuda/Nonzero.cu): ``cub::DeviceReduce::Sum``
  counts the non-zero elements (one single-tile kernel up to one tile, 4096 elements of cub's SM 6.0+ reduce policy,
  a pass over the tiles then a single-tile pass above), ``at::cuda::memcpy_and_sync`` copies the count to the host
  and waits for the stream, ``cub::DeviceSelect::Flagged`` writes the flat indices (an init and a sweep kernel) and,
  for an input of more than one dimension, ``write_indices`` turns them into coordinates. The host waits for the GPU
  at the copy (:data:`HOST_WAIT_ROLES`): the launch queue drains there (:func:`lilou.latency.composition.overhead.
  queue_shares`). The output size depends on the data: the kernels are sized as if every element were non-zero.
* A layer norm of a view that is not contiguous (ConvNeXt's ``x.permute(0, 2, 3, 1)`` before its ``nn.LayerNorm``):
  ``layer_norm_cuda`` (aten/src/ATen/native/cuda/layer_norm_kernel.cu) takes ``input.expect_contiguous()``, a copy
  kernel before the norm. The view launches nothing of its own (:mod:`lilou.fusion.eager_replay` joins it to the
  norm's group), so the copy is added here (:func:`lilou.fusion.eager_layout.strided_tensors` follows the strides).
* A ``Loop`` or ``Scan`` left as one node (past the unroll budget, inside a subgraph, every ``Scan``: README's
  control-flow paragraph). Eager runs it as a Python loop that launches its body's kernels once per iteration, so
  its kernel is :attr:`KernelSpec.launches` back-to-back launches of equal parts of its work, the count the graph
  recorded on the node (:func:`lilou.graph.dag._node_cost`: the body's launching nodes, nested control flow counted
  the same way, times the iterations), composed launch by launch (:func:`lilou.latency.composition.overhead.
  queue_shares`). An ``If`` left as one node launches its larger branch's kernels. Other backends keep one launch: a
  loop TVM compiles is not issued from Python per iteration, and nothing here measured how its runtime issues it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from lilou.graph.costs import CONTROL_FLOW_OPS, CostInput, TensorInfo
from lilou.latency.kernel_model.kernel import KernelSpec, describe_kernel

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph

#: Roles of the kernels written here (:attr:`KernelSpec.role`); a group's own kernel has the role "".
BIAS_ADD = "bias add"
GROUP_NORM_MOMENTS = "group norm moments"
GROUP_NORM_PARAMETERS = "group norm parameters"
GROUP_NORM_APPLY = "group norm apply"
INSTANCE_NORM_REPEAT = "instance norm weight repeat"
INSTANCE_NORM_STATISTICS = "instance norm statistics"
INSTANCE_NORM_INVSTD = "instance norm invstd"
INSTANCE_NORM_APPLY = "instance norm apply"
NONZERO_COUNT = "nonzero count"
NONZERO_COUNT_TO_HOST = "nonzero count to host"
NONZERO_SELECT_INIT = "nonzero select init"
NONZERO_SELECT = "nonzero select"
NONZERO_COORDINATES = "nonzero coordinates"
CONTIGUOUS_COPY = "contiguous copy"
#: Roles after which the host waits for the GPU (a device-to-host copy and a stream synchronisation).
HOST_WAIT_ROLES = frozenset({NONZERO_COUNT_TO_HOST})

#: Tensor types ``at::_convolution`` hands to cuDNN (then adds the bias apart).
_CUDNN_FLOAT_TYPES = frozenset({"float32", "float16", "bfloat16", "float64"})
#: Bytes of the accumulation type of ``ComputeFusedParamsCUDAKernel``'s outputs (FP32 for FP16/BF16/FP32 inputs).
_ACC_BYTES = 4
#: Input types whose affine batch norm ``_select_batch_norm_backend`` hands to cuDNN (scale of the same type).
_CUDNN_NORM_TYPES = frozenset({"float32", "float64"})
#: Elements one single-tile ``DeviceReduceSingleTileKernel`` reduces (cub's SM 6.0+ reduce policy: 256 threads x 16).
_CUB_REDUCE_TILE = 4096


def eager_launches(graph: ModelGraph, group: Sequence[str], spec: KernelSpec,
                   fixed_bytes: int) -> list[tuple[KernelSpec, int]]:
    """The kernels eager PyTorch launches for one kernel group described as ``spec`` (with ``fixed_bytes`` read from
    weights), in launch order, each with the bytes it reads from weights and constants. ``[(spec, fixed_bytes)]``
    for every group but a biased cuDNN convolution's and a group norm's."""
    loops = [n for n in group if graph.dag.nodes[n]["op"] in CONTROL_FLOW_OPS]
    if loops:  # a Loop, Scan or If left as one node: its body's kernels, launched once per iteration
        launches = sum(int(graph.dag.nodes[n].get("launches", 1)) for n in loops)
        return [(replace(spec, launches=max(1, launches)), fixed_bytes)]
    norm = _group_norm(graph, group)
    if norm is not None:
        return _group_norm_kernels(spec, *norm)
    ops = {n: graph.dag.nodes[n]["op"] for n in group}
    convs = [n for n, op in ops.items() if op in ("Conv", "ConvTranspose")]
    if len(convs) == 1 and spec.family == "conv":
        add = _bias_add(graph, convs[0])
        if add is not None:
            return [(spec, fixed_bytes), add]
    instance = [n for n, op in ops.items() if op == "InstanceNormalization"]
    if len(instance) == 1 and not any(ops.get(p) == "Reshape" for p in graph.dag.predecessors(instance[0])):
        return _instance_norm_kernels(graph, instance[0], spec, fixed_bytes)
    nonzero = [n for n, op in ops.items() if op == "NonZero"]
    calls = _nonzero_kernels(graph, nonzero[0], spec) if len(nonzero) == 1 else None
    if calls is not None:
        rest = any(op not in _NONZERO_COMPANIONS for op in ops.values())  # a group the fusion model joined to more
        return calls + ([(spec, fixed_bytes)] if rest else [])
    norms = [n for n, op in ops.items() if op == "LayerNormalization"]
    if len(norms) == 1:
        copy = _contiguous_copy(graph, norms[0])
        if copy is not None:
            return [copy, (spec, fixed_bytes)]
    return [(spec, fixed_bytes)]


def _bias_add(graph: ModelGraph, name: str) -> tuple[KernelSpec, int] | None:
    """The ``output.add_(bias)`` kernel after a cuDNN convolution, or None (no bias, or a backend that adds it
    inside)."""
    conv = graph.dag.nodes[name]
    inputs, outputs = conv["inputs"], conv["outputs"]
    if len(inputs) < 3 or inputs[2] is None or not outputs or outputs[0].shape is None:
        return None
    if _exporter_zero_bias(graph, name, inputs[2].name):
        return None
    x, weight, bias, out = inputs[0], inputs[1], inputs[2], outputs[0]
    if x is None or x.shape is None or weight is None or weight.shape is None:
        return None
    if x.dtype not in _CUDNN_FLOAT_TYPES:
        # an INT8 or FP8 convolution (a quantized file, --precision int8/fp8) is priced as the runtimes that run it
        # run it (TensorRT, onnxruntime), the bias in the convolution's epilogue; eager has no such cuDNN call
        return None
    if not runs_in_cudnn(conv["op"], conv["attributes"], x, weight):
        return None
    channels = out.shape[1] if len(out.shape) > 1 else 1
    broadcast = TensorInfo(bias.name, (1, channels) + (1,) * max(len(out.shape) - 2, 0), bias.dtype, bias.itemsize)
    added = TensorInfo(f"{out.name} + bias", out.shape, out.dtype, out.itemsize)  # in place: the same bytes again
    add = CostInput(op="Add", attributes={}, inputs=[out, broadcast], outputs=[added])
    spec = replace(describe_kernel([add]), role=BIAS_ADD)
    return spec, broadcast.nbytes or 0


def _exporter_zero_bias(graph: ModelGraph, conv: str, bias: str) -> bool:
    """Whether the bias is one scalar expanded to the channels: the zero bias the dynamo exporter (torchlib's
    ``aten_convolution``) builds for a convolution that has none, ``Expand(CastLike(0), ...)``. A trained bias is an
    initializer; the convolution ran without one in eager."""
    dag = graph.dag
    for producer in dag.predecessors(conv):
        data = dag.nodes[producer]
        if any(t.name == bias for t in data["outputs"]):
            source = data["inputs"][0] if data["op"] == "Expand" and data["inputs"] else None
            return source is not None and source.shape is not None and math.prod(source.shape) == 1
    return False


def runs_in_cudnn(op: str, attributes: dict, x: TensorInfo, weight: TensorInfo) -> bool:
    """Whether ``at::_convolution`` runs this convolution in cuDNN (``_select_conv_backend``): every CUDA
    convolution but a depthwise one outside cuDNN's depthwise heuristics (ONNX tensors are NCHW)."""
    groups = int(attributes.get("group", 1))
    shape = tuple(x.shape)
    if len(shape) == 3:  # conv1d: viewed as 2-D, (N, C, 1, L), before the backend is chosen
        shape = (shape[0], shape[1], 1, shape[2])
        weight_shape = tuple(weight.shape[:2]) + (1,) + tuple(weight.shape[2:])
        strides = [1, *(attributes.get("strides") or [1])]
        dilations = [1, *(attributes.get("dilations") or [1])]
    else:
        weight_shape = tuple(weight.shape)
        strides = list(attributes.get("strides") or [1] * (len(shape) - 2))
        dilations = list(attributes.get("dilations") or [1] * (len(shape) - 2))
    depthwise = (op == "Conv" and len(shape) in (4, 5) and groups > 1 and shape[1] == groups
                 and weight_shape[0] % shape[1] == 0)
    if not depthwise:
        return True
    return (x.dtype == "float16" and weight.dtype == "float16" and len(shape) == 4
            and all(d == 1 for d in dilations) and (strides[0] == strides[-1] or shape[2] == 1) and shape[1] >= 32
            and _cudnn_depthwise_workload(shape, weight_shape, strides[-1]))


def _cudnn_depthwise_workload(shape: tuple[int, ...], weight: tuple[int, ...], stride: int) -> bool:
    """``check_cudnn_depthwise_workload_with_filter`` (cuDNN 8.2 and newer): an FP16 depthwise convolution that
    PyTorch hands to cuDNN."""
    batch, channels, height, width = shape
    if height == 1 and stride == 1:
        return True
    if weight[2] != weight[3]:
        return False
    window = weight[3]
    if window not in (1, 3, 5) or width < 7:
        return False
    if stride == 1:
        return True
    if stride != 2:
        return False
    if batch == 1:
        return (window == 1 and width <= 28) or window in (3, 5)
    if window == 1 and batch <= 16 and channels >= 128 and width <= 7:
        return True
    return window in (3, 5) and (channels >= 512 or (channels >= 256 and width >= 28))


def _group_norm(graph: ModelGraph, group: Sequence[str]) -> tuple[TensorInfo, int, bool] | None:
    """(X, groups, affine) of the one group norm a kernel group computes, or None."""
    dag = graph.dag
    members = set(group)
    norms = [n for n in group if dag.nodes[n]["op"] in ("InstanceNormalization", "GroupNormalization")]
    if len(norms) != 1:
        return None
    node = dag.nodes[norms[0]]
    if node["op"] == "GroupNormalization":
        x = node["inputs"][0]
        groups = int(node["attributes"].get("num_groups", 0))
        return (x, groups, True) if x is not None and x.shape is not None and groups > 0 else None
    # aten.group_norm written out: x -> Reshape (N, G, -1) -> InstanceNormalization -> Reshape (x's shape)
    before = [p for p in dag.predecessors(norms[0]) if dag.nodes[p]["op"] == "Reshape"]
    after = [s for s in dag.successors(norms[0]) if dag.nodes[s]["op"] == "Reshape"]
    if len(before) != 1 or len(after) != 1 or not {before[0], after[0]} <= members:
        return None
    x, grouped = dag.nodes[before[0]]["inputs"][0], node["inputs"][0]
    if x is None or x.shape is None or grouped is None or grouped.shape is None or len(grouped.shape) < 2:
        return None
    affine = any(dag.nodes[n]["op"] in ("Mul", "Add") for n in group)
    return x, int(grouped.shape[1]), affine


def _group_norm_kernels(spec: KernelSpec, x: TensorInfo, groups: int, affine: bool) -> list[tuple[KernelSpec, int]]:
    """The two or three kernels of ``GroupNormKernelImplInternal`` for the group described as ``spec``."""
    n, c = x.shape[0], x.shape[1] if len(x.shape) > 1 else 1
    elements = x.elements or 0
    spatial = elements // max(n * c, 1)
    rows = n * groups
    itemsize = x.itemsize
    # One block per row, as a layer norm over (rows, cols) runs: priced by the layer-norm model with that norm's
    # elements (its grid), and the bytes it moves: X read once, a mean and a 1/std written per row. (Given the
    # 2 x rows values it writes as its elements, the model, which never saw a norm write so few, priced the
    # moments of a 64 x 64 x 64 UNet activation 25x above the whole group norm it priced before.)
    moments = replace(spec, family="layernorm", role=GROUP_NORM_MOMENTS, flops=4 * elements,
                      bytes_read=x.nbytes or 0, bytes_written=2 * rows * itemsize, out_elements=elements,
                      rows=rows, cols=elements // max(rows, 1))
    apply_reads = spec.bytes_read
    kernels = [(moments, 0)]
    if affine and spatial > 1:
        weights = 2 * c * itemsize
        parameters = replace(spec, family="elementwise", role=GROUP_NORM_PARAMETERS, ops=("Mul", "Add"),
                             flops=3 * n * c, bytes_read=2 * rows * itemsize + weights,
                             bytes_written=2 * n * c * _ACC_BYTES, out_elements=2 * n * c, rows=0, cols=0)
        kernels.append((parameters, weights))
        apply_reads = max(spec.bytes_read - weights, 0) + 2 * n * c * _ACC_BYTES
    apply = replace(spec, family="elementwise", role=GROUP_NORM_APPLY, flops=2 * elements, bytes_read=apply_reads,
                    rows=0, cols=0)
    kernels.append((apply, 0 if affine and spatial > 1 else 2 * c * itemsize * affine))
    return kernels


def _instance_norm_kernels(graph: ModelGraph, name: str, spec: KernelSpec, fixed_bytes: int
                           ) -> list[tuple[KernelSpec, int]]:
    """The kernels of ``aten.instance_norm`` for the group described as ``spec``: the repeats of an affine norm's
    weight and bias, then cuDNN's batch norm (the group's own kernel) or the native one's three."""
    node = graph.dag.nodes[name]
    x = node["inputs"][0]
    if x is None or x.shape is None or len(x.shape) < 3 or not x.elements:
        return [(spec, fixed_bytes)]
    n, c = x.shape[0], x.shape[1]
    rows, elements, itemsize = n * c, x.elements, x.itemsize
    # a module's weight and bias are initializers; a norm without them reads constants the exporter wrote
    affine = all(t is not None and graph.writer(name, t.name) is None for t in node["inputs"][1:3])
    kernels: list[tuple[KernelSpec, int]] = []
    if affine:
        repeat = replace(spec, family="elementwise", role=INSTANCE_NORM_REPEAT, ops=("Tile",), flops=0,
                         bytes_read=c * itemsize, bytes_written=rows * itemsize, out_elements=rows, rows=0, cols=0)
        kernels += [(repeat, c * itemsize), (repeat, c * itemsize)]
        if x.dtype in _CUDNN_NORM_TYPES:
            return kernels + [(replace(spec, bytes_read=spec.bytes_read + 2 * (rows - c) * itemsize), 0)]
    statistics = replace(spec, family="layernorm", role=INSTANCE_NORM_STATISTICS, flops=4 * elements,
                         bytes_read=x.nbytes or 0, bytes_written=2 * rows * _ACC_BYTES, out_elements=2 * rows,
                         rows=rows, cols=elements // rows)
    invstd = replace(spec, family="elementwise", role=INSTANCE_NORM_INVSTD, ops=("Add", "Sqrt", "Reciprocal"),
                     flops=3 * rows, bytes_read=rows * _ACC_BYTES, bytes_written=rows * _ACC_BYTES, out_elements=rows,
                     rows=0, cols=0)
    weights = 2 * rows * itemsize if affine else 0
    apply = replace(spec, family="elementwise", role=INSTANCE_NORM_APPLY, flops=(4 if affine else 2) * elements,
                    bytes_read=(x.nbytes or 0) + 2 * rows * _ACC_BYTES + weights, rows=0, cols=0)
    return kernels + [(statistics, 0), (invstd, 0), (apply, 0)]


#: Ops a NonZero's group may hold beside it and still be the ``nonzero`` call alone (views of its output).
_NONZERO_COMPANIONS = frozenset({"NonZero", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity"})
_INDEX_BYTES = 8  # int64 indices


def _nonzero_kernels(graph: ModelGraph, name: str, spec: KernelSpec) -> list[tuple[KernelSpec, int]] | None:
    """The kernels of ``nonzero_cuda_out_impl`` and its copy of the count to the host, sized as if every element of
    the input were non-zero (the output's size depends on the data); None for an input of unknown shape."""
    x = graph.dag.nodes[name]["inputs"][0]
    if x is None or x.shape is None:
        return None
    elements, dims = x.elements or 0, max(len(x.shape), 1)
    indices = elements * _INDEX_BYTES

    def kernel(role: str, family: str, read: int, written: int, out: int, rows: int = 0, cols: int = 0) -> KernelSpec:
        return replace(spec, family=family, role=role, ops=("NonZero",), flops=elements if read else 0, bytes_read=read,
                       bytes_written=written, out_elements=out, rows=rows, cols=cols, gemm=None, conv=None)

    count = kernel(NONZERO_COUNT, "reduction", x.nbytes or 0, 4, 1, 1, elements)
    kernels = [count]
    if elements > _CUB_REDUCE_TILE:  # a partial count per tile, then DeviceReduceSingleTileKernel over them
        tiles = -(-elements // _CUB_REDUCE_TILE)
        kernels = [replace(count, bytes_written=4 * tiles, out_elements=tiles),
                   kernel(NONZERO_COUNT, "reduction", 4 * tiles, 4, 1, 1, tiles)]
    kernels += [kernel(NONZERO_COUNT_TO_HOST, "elementwise", 4, 4, 1),
                kernel(NONZERO_SELECT_INIT, "elementwise", 0, 0, 0),
                kernel(NONZERO_SELECT, "reduction", x.nbytes or 0, indices, elements, 1, elements)]
    if len(x.shape) > 1:
        kernels.append(kernel(NONZERO_COORDINATES, "elementwise", indices, dims * indices, dims * elements))
    return [(k, 0) for k in kernels]


def _contiguous_copy(graph: ModelGraph, name: str) -> tuple[KernelSpec, int] | None:
    """The copy ``layer_norm_cuda``'s ``input.expect_contiguous()`` makes of a view that is not contiguous, or None."""
    from lilou.fusion.eager_layout import is_contiguous, strided_tensors

    x = graph.dag.nodes[name]["inputs"][0]
    if x is None or x.shape is None:
        return None
    strided = graph.derived("eager strided views", lambda: strided_tensors(graph, graph.runtime_nodes())[0])
    strides = strided.get(x.name)
    if strides is None or is_contiguous(x.shape, strides):
        return None
    copied = TensorInfo(f"{x.name} contiguous", x.shape, x.dtype, x.itemsize)
    copy = CostInput(op="Transpose", attributes={}, inputs=[x], outputs=[copied])
    return replace(describe_kernel([copy]), role=CONTIGUOUS_COPY), 0
