"""Fuzz `lilou graph`, `lilou fuse` and `lilou infer --gpu a10g` with hostile ONNX files (issue #17, item 4),
and `lilou llm` with hostile config.json files.

Three kinds of cases, drawn from a seeded generator (case i of seed s is always the same file):

- structure-aware mutants: small random graphs of common ops (MatMul, Gemm, Conv, Add, Relu, Reshape,
  Transpose, Softmax, LayerNormalization, Concat, Slice, ConstantOfShape, Range, Loop, If, ...) with
  random shapes and attributes (zero, negative, huge, wrong types), missing inputs, duplicate names,
  random opsets and initializer dims;
- mutants of real files: examples/resnet18.onnx (and `--zoo NAME` exports, `--file PATH` files) with random byte flips,
  truncations and insertions, or with random dims/attributes/opsets rewritten in the parsed protobuf;
- one case in ten: a Hugging Face config.json of a few families (Llama, Mixtral, Falcon, GPT-2, a nested
  text_config) with fields dropped or set to hostile JSON values (booleans, strings, NaN, huge or negative
  numbers, lists), its text cut, flipped or nested deep, through `lilou llm` with random lengths, TP and dtype.

Every case runs `lilou.cli.main` in a child forked from this (already imported) process, under
RLIMIT_AS 2 GiB and a 30 s wall-clock limit, and is classified:

    ok (exit 0) | input (exit 2, one stderr line) | internal (exit 1, one line) | traceback |
    hang (over the time limit) | memory (peak RSS over 1 GiB, MemoryError, or killed) |
    crash (killed by a signal) | contract (any other exit status or stderr shape)

Exit status 1 when any case is a traceback, hang, memory or crash failure. `--out DIR` keeps every
failing case's file (with its argv and stderr) and writes summary.json.

    python scripts/fuzz.py --cases 2000 [--seconds S] [--seed 0] [--workers 2] [--out outputs/fuzz]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 30.0
RSS_LIMIT = 1 << 30          # peak RSS of one case, bytes
ADDRESS_LIMIT = 2 << 30      # RLIMIT_AS of a case's process
FAILURES = ("traceback", "hang", "memory", "crash")
CLASSES = ("ok", "input", "internal", "contract", *FAILURES)


# ----------------------------------------------------------------------------- random values

HOSTILITY = [0.25]  # chance that a drawn value is a hostile one; set per case


def rdim(rng: random.Random) -> int | str:
    """A dimension: mostly small, sometimes zero, negative, symbolic or huge."""
    r = rng.random()
    if r >= HOSTILITY[0]:
        return rng.choice([1, 1, 2, 3, 4, 4, 8, 16, 32])
    return rng.choice([0, -1, -7, "N", "batch", 2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1, 10**6])


def rint(rng: random.Random) -> int:
    r = rng.random()
    if r >= HOSTILITY[0]:
        return rng.randint(-3, 4)
    return rng.choice([0, -1, 2**31, -(2**31), 2**40, 2**62, 2**63 - 1, -(2**63), 10**9])


def rshape(rng: random.Random, rank: int | None = None) -> list:
    rank = rng.choice([0, 1, 2, 2, 3, 4, 4, 5]) if rank is None else rank
    return [rdim(rng) for _ in range(rank)]


DTYPES = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64,
          TensorProto.INT32, TensorProto.DOUBLE, TensorProto.BOOL, TensorProto.STRING, TensorProto.BFLOAT16,
          TensorProto.UINT8, TensorProto.FLOAT8E4M3FN, 0, 99]


class Builder:
    """One random graph: nodes, initializers and the tensors available as inputs."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.available: list[str] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        if self.rng.random() < 0.03 * 4 * HOSTILITY[0] and self.available:  # duplicate names on purpose
            return self.rng.choice(self.available)
        return f"{prefix}{self.count}"

    def pick(self) -> str:
        r = self.rng.random()
        if r < 0.1 * HOSTILITY[0]:
            return "ghost"   # never defined
        if r < 0.2 * HOSTILITY[0]:
            return ""        # an omitted input
        return self.rng.choice(self.available)

    def init(self, dims, dtype=TensorProto.FLOAT, values=None) -> str:
        """An initializer; with large dims its bytes are absent (external or nowhere)."""
        rng = self.rng
        name = self.name("w")
        if rng.random() < 0.05 * 4 * HOSTILITY[0]:
            dtype = rng.choice(DTYPES)
        size = 1
        for d in dims:
            size *= d if isinstance(d, int) else 1
        concrete = all(isinstance(d, int) and 0 <= d <= 4096 for d in dims)
        if concrete and 0 <= size <= 4096 and dtype in (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                                                        TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL):
            np_type = helper.tensor_dtype_to_np_dtype(dtype)
            if values is not None and size == len(values):
                arr = np.array(values, dtype=object).astype(np.float64)
                with np.errstate(all="ignore"):
                    arr = arr.astype(np_type) if dtype != TensorProto.INT64 else np.array(values, dtype=np.int64)
                arr = arr.reshape(dims)
            else:
                arr = (np.random.default_rng(rng.getrandbits(32)).standard_normal(size) * 3).astype(np_type)
                arr = arr.reshape(dims)
            t = numpy_helper.from_array(arr, name)
        else:
            t = onnx.TensorProto(name=name, data_type=dtype,
                                 dims=[d if isinstance(d, int) and abs(d) < 2**63 else 7 for d in dims])
            if rng.random() < 0.7:
                t.data_location = TensorProto.EXTERNAL
                entry = t.external_data.add()
                entry.key, entry.value = "location", rng.choice(["absent.weights", "../etc/passwd", "", "/dev/zero"])
        self.inits.append(t)
        if rng.random() < 0.1:  # also declared as a graph input, maybe with another shape
            self.inputs.append(helper.make_tensor_value_info(name, dtype, rshape(rng) if rng.random() < 0.5 else dims))
        return name

    def ints(self, values) -> str:
        return self.init([len(values)], TensorProto.INT64, values)

    def scalar(self, value, dtype=TensorProto.FLOAT) -> str:
        return self.init([], dtype, [value])

    def add(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        rng = self.rng
        outs = [self.name("t") for _ in range(n_out)]
        if rng.random() < 0.03 * 4 * HOSTILITY[0] and inputs:
            inputs = inputs[:-1]               # a missing input
        if rng.random() < 0.02 * 4 * HOSTILITY[0]:
            inputs = [*inputs, self.pick()]    # an extra one
        attrs = {k: v for k, v in attrs.items() if v is not None}
        if rng.random() < 0.04 * 4 * HOSTILITY[0]:
            attrs[rng.choice(["axis", "perm", "kernel_shape", "bogus"])] = rng.choice([1.5, "text", [2**62], -9])
        node = helper.make_node(op, inputs, outs, name=self.name("n"), domain=domain, **attrs)
        self.nodes.append(node)
        self.available.extend(outs)
        return outs


def maybe(rng: random.Random, value, p: float = 0.5):
    return value if rng.random() < p else None


def add_random_op(b: Builder) -> None:
    rng = b.rng
    x = b.pick()
    op = rng.choice(["MatMul", "Gemm", "Conv", "Add", "Relu", "Reshape", "Transpose", "Softmax", "LayerNormalization",
                     "Concat", "Slice", "ConstantOfShape", "Range", "MaxPool", "Gather", "ReduceMean", "Expand",
                     "Tile", "Pad", "Cast", "Split", "Unsqueeze", "Squeeze", "BatchNormalization", "Shape", "Mul",
                     "Sigmoid", "Where", "Flatten", "Resize", "Loop", "If", "Einsum", "GlobalAveragePool"])
    if op == "MatMul":
        b.add(op, [x, b.init(rshape(rng, rng.choice([1, 2, 2, 3])))])
    elif op == "Gemm":
        ins = [x, b.init(rshape(rng, 2))] + ([b.init(rshape(rng, rng.choice([1, 2])))] if rng.random() < 0.6 else [])
        b.add(op, ins, transA=maybe(rng, rng.choice([0, 1, 2])), transB=maybe(rng, rng.choice([0, 1, -1])),
              alpha=maybe(rng, rng.choice([1.0, 0.0, -1e30, float("nan")]), 0.2))
    elif op in ("Conv", "MaxPool"):
        spatial = rng.choice([1, 2, 2, 2, 3])
        kernel = [rng.choice([1, 3, 3, 5, 0, -1, 2**40]) for _ in range(spatial)]
        attrs = dict(strides=maybe(rng, [rng.choice([1, 2, 0, -1, 2**40]) for _ in range(spatial)]),
                     pads=maybe(rng, [rng.choice([0, 1, 2, -1, 2**40]) for _ in range(2 * spatial)]),
                     dilations=maybe(rng, [rng.choice([1, 2, 0, 2**40]) for _ in range(spatial)], 0.3),
                     auto_pad=maybe(rng, rng.choice(["SAME_UPPER", "VALID", "SAME_LOWER", "BOGUS"]), 0.2))
        if op == "Conv":
            group = maybe(rng, rng.choice([1, 2, 3, 0, -1]), 0.3)
            ins = [x, b.init([rdim(rng), rdim(rng), *kernel])]
            if rng.random() < 0.4:
                ins.append(b.init([rdim(rng)]))
            b.add(op, ins, group=group, kernel_shape=maybe(rng, kernel, 0.3), **attrs)
        else:
            b.add(op, [x], kernel_shape=kernel, ceil_mode=maybe(rng, 1, 0.2), **attrs)
    elif op in ("Add", "Mul"):
        other = b.pick() if rng.random() < 0.5 else b.init(rshape(rng))
        b.add(op, [x, other])
    elif op in ("Relu", "Sigmoid", "GlobalAveragePool"):
        b.add(op, [x])
    elif op == "Reshape":
        target = [rng.choice([-1, 0, 1, 2, 4, 8, 16, -2, 2**40, 2**62]) for _ in range(rng.choice([0, 1, 2, 3, 4]))]
        b.add(op, [x, b.ints(target)], allowzero=maybe(rng, rng.choice([0, 1]), 0.2))
    elif op == "Transpose":
        rank = rng.choice([1, 2, 3, 4])
        perm = list(range(rank))
        rng.shuffle(perm)
        if rng.random() < 0.2:
            perm[0] = rng.choice([rank, -1, 2**40, perm[-1]])
        b.add(op, [x], perm=maybe(rng, perm, 0.8))
    elif op in ("Softmax", "Flatten"):
        b.add(op, [x], axis=maybe(rng, rint(rng)))
    elif op == "LayerNormalization":
        ins = [x, b.init(rshape(rng, rng.choice([0, 1, 1, 2])))]
        if rng.random() < 0.5:
            ins.append(b.init(rshape(rng, 1)))
        b.add(op, ins, axis=maybe(rng, rint(rng)), epsilon=maybe(rng, rng.choice([1e-5, 0.0, -1.0]), 0.2))
    elif op == "Concat":
        others = [b.pick() for _ in range(rng.choice([0, 1, 2]))]
        b.add(op, [x, *others], axis=rint(rng) if rng.random() < 0.9 else None)
    elif op == "Slice":
        n = rng.choice([0, 1, 1, 2, 3])
        ins = [x, b.ints([rint(rng) for _ in range(n)]), b.ints([rint(rng) for _ in range(n)])]
        if rng.random() < 0.6:
            ins.append(b.ints([rint(rng) for _ in range(n)]))
            if rng.random() < 0.6:
                ins.append(b.ints([rng.choice([1, 2, -1, 0, 2**62]) for _ in range(n)]))
        b.add(op, ins)
    elif op == "ConstantOfShape":
        dims = [rng.choice([1, 2, 4, 16, 0, -1, 2**20, 2**31, 2**62]) for _ in range(rng.choice([0, 1, 2, 3]))]
        value = maybe(rng, helper.make_tensor("value", rng.choice([TensorProto.FLOAT, TensorProto.INT64]), [1], [1]))
        b.add(op, [b.ints(dims)], value=value)
    elif op == "Range":
        dtype = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.DOUBLE])
        vals = [rng.choice([0, 1, -5, 10, 1e8, 4e9, 2**62]), rng.choice([0, 1, 16, 1e8, -1e9, 2**62]),
                rng.choice([1, 2, -1, 0, 0.5, 1e-9])]
        b.add(op, [b.scalar(v, dtype) for v in vals])
    elif op == "Gather":
        idx = b.init(rshape(rng, rng.choice([0, 1, 2])), TensorProto.INT64) if rng.random() < 0.8 else b.pick()
        b.add(op, [x, idx], axis=maybe(rng, rint(rng)))
    elif op == "ReduceMean":
        if rng.random() < 0.5:
            b.add(op, [x], axes=maybe(rng, [rint(rng)]), keepdims=maybe(rng, rng.choice([0, 1])))
        else:
            b.add(op, [x, b.ints([rint(rng)])], keepdims=maybe(rng, rng.choice([0, 1])))
    elif op in ("Expand", "Tile"):
        b.add(op, [x, b.ints([rng.choice([1, 2, 4, 0, -1, 2**20, 2**40]) for _ in range(rng.choice([1, 2, 3]))])])
    elif op == "Pad":
        n = rng.choice([2, 4, 6, 8])
        b.add(op, [x, b.ints([rng.choice([0, 1, 2, -1, -100, 2**30, 2**62]) for _ in range(n)])],
              mode=maybe(rng, rng.choice(["constant", "reflect", "edge", "wrap", "nope"]), 0.3))
    elif op == "Cast":
        b.add(op, [x], to=rng.choice(DTYPES))
    elif op == "Split":
        n_out = rng.choice([1, 2, 3])
        ins = [x] + ([b.ints([rng.choice([1, 2, 0, -1, 2**40]) for _ in range(n_out)])] if rng.random() < 0.5 else [])
        b.add(op, ins, n_out=n_out, axis=maybe(rng, rint(rng)), num_outputs=maybe(rng, n_out, 0.3))
    elif op in ("Unsqueeze", "Squeeze"):
        b.add(op, [x, b.ints([rint(rng) for _ in range(rng.choice([0, 1, 2]))])])
    elif op == "BatchNormalization":
        c = rdim(rng)
        b.add(op, [x, *(b.init([c]) for _ in range(4))], epsilon=maybe(rng, 1e-5))
    elif op == "Shape":
        b.add(op, [x], start=maybe(rng, rint(rng), 0.3), end=maybe(rng, rint(rng), 0.3))
    elif op == "Where":
        b.add(op, [b.init(rshape(rng), TensorProto.BOOL), x, b.pick()])
    elif op == "Resize":
        scales = b.init([rng.choice([2, 4, 0])], TensorProto.FLOAT, None)
        b.add(op, [x, "", scales], mode=maybe(rng, rng.choice(["nearest", "linear", "cubic"])))
    elif op == "Einsum":
        b.add(op, [x, b.pick()], equation=rng.choice(["ij,jk->ik", "bij,bjk->bik", "i,i->", "ab->ba", "??", ""]))
    elif op == "Loop":
        body_shape = rshape(rng)
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node(rng.choice(["Relu", "MatMul", "Add"]), ["h_in", "h_in"][:1 + rng.randint(0, 1)],
                              ["h_out"])],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h_in", TensorProto.FLOAT, body_shape)],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h_out", TensorProto.FLOAT, body_shape)])
        trip = b.init([], TensorProto.INT64, [rng.choice([1, 10, 0, -1, 2**40, 2**62])])
        b.add(op, [trip, b.init([], TensorProto.BOOL, [1]) if rng.random() < 0.8 else "", x], body=body)
    else:  # If
        def branch(tag: str):
            return helper.make_graph([helper.make_node(rng.choice(["Relu", "Sigmoid", "Neg"]), [x], [f"{tag}_out"])],
                                     tag, [], [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT,
                                                                             rshape(rng))])
        cond = b.init([], TensorProto.BOOL, [rng.choice([0, 1])])
        b.add(op, [cond], then_branch=branch("then"), else_branch=maybe(rng, branch("else"), 0.9))


def structure_mutant(rng: random.Random) -> bytes:
    b = Builder(rng)
    for i in range(rng.choice([1, 1, 2, 3])):
        name = f"x{i}"
        dtype = TensorProto.FLOAT if rng.random() < 0.9 else rng.choice(DTYPES)
        shape = rshape(rng) if rng.random() < 0.95 else None
        b.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        b.available.append(name)
    for _ in range(rng.choice([1, 2, 3, 4, 6, 8, 12])):
        add_random_op(b)
    produced = [o for n in b.nodes for o in n.output]
    outs = produced[-rng.choice([1, 1, 2]):] if produced else []
    if rng.random() < 0.05:
        outs = [*outs, "ghost_out"]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, rshape(rng) if rng.random() < 0.2 else None)
               for o in outs]
    value_info = []
    if rng.random() < 0.1 and produced:  # stale or wrong value_info
        value_info.append(helper.make_tensor_value_info(rng.choice(produced), rng.choice(DTYPES), rshape(rng)))
    nodes = b.nodes
    if rng.random() < 0.1:
        nodes = nodes[::-1]
    if rng.random() < 0.05 and nodes:
        nodes = [*nodes, nodes[rng.randrange(len(nodes))]]  # the same node twice
    graph = helper.make_graph(nodes, "fuzz", b.inputs, outputs, b.inits, value_info=value_info)
    r = rng.random()
    opset = rng.choice([17, 18, 20]) if r < 0.8 else rng.choice([1, 6, 7, 9, 11, 13, 21, 22, 23, 25, 0, 99, 2**40])
    imports = [helper.make_opsetid("", opset)]
    if rng.random() < 0.03:
        imports.append(helper.make_opsetid("", rng.choice([11, 20])))  # the default domain imported twice
    model = helper.make_model(graph, opset_imports=imports)
    if rng.random() < 0.05:
        model.ir_version = rng.choice([0, 1, 3, 99, 2**40])
    return model.SerializeToString()


def coherent_mutant(rng: random.Random) -> bytes:
    """A shape-consistent chain (valid unless a rare hostile value slips in): vision or sequence layout."""
    b = Builder(rng)
    vision = rng.random() < 0.5
    shape = [rng.choice([1, 2]), rng.choice([3, 4, 8]), rng.choice([8, 16]), rng.choice([8, 16])] if vision \
        else [rng.choice([1, 2]), rng.choice([4, 16]), rng.choice([8, 32])]
    b.inputs.append(helper.make_tensor_value_info("x0", TensorProto.FLOAT, shape))
    b.available.append("x0")
    x = "x0"
    for _ in range(rng.choice([2, 4, 6, 10])):
        ops = ["Relu", "Add", "Softmax", "Transpose", "Concat", "Slice", "Reshape", "Mul", "Sigmoid"]
        ops += ["Conv", "Conv", "MaxPool", "BatchNormalization"] if len(shape) == 4 else ["MatMul", "MatMul",
                                                                                        "LayerNormalization", "Gemm"]
        op = rng.choice(ops)
        rank, last = len(shape), shape[-1]
        if op in ("Relu", "Sigmoid"):
            (x,) = b.add(op, [x])
        elif op in ("Add", "Mul"):
            (x,) = b.add(op, [x, b.init([last] if rng.random() < 0.5 else list(shape))])
        elif op == "Softmax":
            (x,) = b.add(op, [x], axis=rng.randrange(-rank, rank))
        elif op == "Transpose":
            perm = list(range(rank))
            rng.shuffle(perm)
            (x,) = b.add(op, [x], perm=perm)
            shape = [shape[i] for i in perm]
        elif op == "Concat":
            axis = rng.randrange(rank)
            (x,) = b.add(op, [x, x], axis=axis)
            shape[axis] *= 2
        elif op == "Slice":
            axis = rng.randrange(rank)
            end = rng.randint(1, shape[axis])
            (x,) = b.add(op, [x, b.ints([0]), b.ints([end]), b.ints([axis])])
            shape[axis] = end
        elif op == "Reshape":
            total = 1
            for d in shape:
                total *= d
            new = [shape[0], -1] if rng.random() < 0.5 else [total // last, last]
            (x,) = b.add(op, [x, b.ints(new)])
            shape = [new[0], total // new[0]] if new[1] == -1 else new
        elif op == "Conv":
            k = rng.choice([1, 3])
            out_c = rng.choice([4, 8])
            (x,) = b.add(op, [x, b.init([out_c, shape[1], k, k])], pads=[k // 2] * 4)
            shape = [shape[0], out_c, shape[2], shape[3]]
        elif op == "MaxPool":
            if min(shape[2:]) >= 2:
                (x,) = b.add(op, [x], kernel_shape=[2, 2], strides=[2, 2])
                shape = [shape[0], shape[1], shape[2] // 2, shape[3] // 2]
        elif op == "BatchNormalization":
            (x,) = b.add(op, [x, *(b.init([shape[1]]) for _ in range(4))])
        elif op == "MatMul":
            n = rng.choice([8, 16, 64])
            (x,) = b.add(op, [x, b.init([last, n])])
            shape = [*shape[:-1], n]
        elif op == "Gemm":
            total = 1
            for d in shape[:-1]:
                total *= d
            (h,) = b.add("Reshape", [x, b.ints([total, last])])
            n = rng.choice([8, 16])
            (x,) = b.add(op, [h, b.init([last, n]), b.init([n])])
            shape = [total, n]
        else:  # LayerNormalization
            (x,) = b.add(op, [x, b.init([last]), b.init([last])], axis=-1)
    graph = helper.make_graph(b.nodes, "coherent", b.inputs, [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
                              b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", rng.choice([17, 18, 20]))]).SerializeToString()


# ----------------------------------------------------------------------------- real-file mutants

def byte_mutant(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(["flip", "flip", "truncate", "insert", "overwrite", "duplicate", "varint"])
        pos = rng.randrange(len(buf)) if buf else 0
        if kind == "flip":
            for _ in range(rng.choice([1, 2, 4, 16, 64])):
                p = rng.randrange(len(buf)) if buf else 0
                if buf:
                    buf[p] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 2, 8, 100])))
        elif kind == "overwrite":
            n = rng.choice([1, 4, 8])
            buf[pos:pos + n] = bytes(rng.getrandbits(8) for _ in range(n))
        elif kind == "duplicate":
            n = rng.choice([16, 256, 4096])
            buf[pos:pos] = buf[pos:pos + n]
        else:  # a big varint (lengths, dims) in place
            buf[pos:pos + 1] = bytes([0xff] * rng.choice([4, 9])) + bytes([rng.choice([0x01, 0x7f])])
    return bytes(buf)


def field_mutant(rng: random.Random, model: onnx.ModelProto) -> bytes:
    """Rewrite a few dims, attributes, opsets or names of a parsed real model."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(["init-dim", "input-dim", "attr", "attr", "opset", "rename", "drop-node", "drop-init",
                           "dtype", "swap-inputs"])
        if kind == "init-dim" and g.initializer:
            t = g.initializer[rng.randrange(len(g.initializer))]
            if t.dims:
                t.dims[rng.randrange(len(t.dims))] = rint(rng) if rng.random() < 0.5 else rng.choice([0, 1, 2**40])
        elif kind == "input-dim" and g.input:
            dims = g.input[rng.randrange(len(g.input))].type.tensor_type.shape.dim
            if dims:
                d = dims[rng.randrange(len(dims))]
                if rng.random() < 0.7:
                    d.dim_value = rng.choice([0, 1, 3, 2**40, 2**62])
                else:
                    d.dim_param = "N"
        elif kind == "attr" and g.node:
            node = g.node[rng.randrange(len(g.node))]
            if node.attribute:
                a = node.attribute[rng.randrange(len(node.attribute))]
                if a.ints:
                    a.ints[rng.randrange(len(a.ints))] = rint(rng)
                elif a.type == onnx.AttributeProto.INT:
                    a.i = rint(rng)
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice([0.0, -1.0, float("inf"), float("nan")])
                else:
                    a.type = rng.choice([onnx.AttributeProto.INT, onnx.AttributeProto.STRING, onnx.AttributeProto.INTS])
        elif kind == "opset" and m.opset_import:
            m.opset_import[0].version = rng.choice([1, 7, 11, 13, 21, 0, 99])
        elif kind == "rename" and g.node:
            node = g.node[rng.randrange(len(g.node))]
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(["ghost", "", g.node[0].output[0]])
            else:
                node.op_type = rng.choice(["Nope", "Conv", "Loop"])
        elif kind == "drop-node" and g.node:
            del g.node[rng.randrange(len(g.node))]
        elif kind == "drop-init" and g.initializer:
            del g.initializer[rng.randrange(len(g.initializer))]
        elif kind == "dtype" and g.initializer:
            g.initializer[rng.randrange(len(g.initializer))].data_type = rng.choice(DTYPES)
        elif kind == "swap-inputs" and g.node:
            node = g.node[rng.randrange(len(g.node))]
            if len(node.input) > 1:
                node.input[0], node.input[1] = node.input[1], node.input[0]
    return m.SerializeToString()


# ----------------------------------------------------------------------------- LLM configs (`lilou llm`)

#: Hugging Face config.json files of a few families, the seeds of the `lilou llm` cases.
LLM_CONFIGS = [
    {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False},
    {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
     "num_experts_per_tok": 2},
    {"model_type": "falcon", "num_hidden_layers": 32, "hidden_size": 4544, "num_attention_heads": 71,
     "vocab_size": 65024, "multi_query": True},
    {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257},
    {"model_type": "qwen2_vl", "text_config": {"num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
                                                "num_key_value_heads": 4, "intermediate_size": 18944,
                                                "vocab_size": 152064}},
    {"model_type": "gemma2", "num_hidden_layers": 26, "hidden_size": 2304, "num_attention_heads": 8,
     "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 9216, "vocab_size": 256000,
     "sliding_window": 4096, "attn_logit_softcapping": 50.0},
    {"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
     "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
     "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "kv_lora_rank": 512,
     "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400},
    {"model_type": "llama4", "vision_config": {"model_type": "llama4_vision_model"},
     "text_config": {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120,
                     "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                     "intermediate_size_mlp": 16384, "num_local_experts": 128, "num_experts_per_tok": 1,
                     "interleave_moe_layer_step": 2, "vocab_size": 202048, "attention_chunk_size": 8192}},
    {"model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"},
     "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
                     "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                     "intermediate_size": 21504, "sliding_window": 1024}},
]
_HOSTILE_JSON = [0, -1, -(2**31), 2**31, 2**62, 10**30, 0.5, 4096.0, -0.0, float("nan"), float("inf"), True, False,
                 None, "", "4096", "x" * 1000, [], [4096], {}, {"hidden_size": 4096}]


def llm_config_mutant(rng: random.Random) -> bytes:
    """A config.json from :data:`LLM_CONFIGS` with fields replaced by hostile values, dropped or added, or its
    JSON text cut, flipped or nested deep."""
    config = json.loads(json.dumps(rng.choice(LLM_CONFIGS)))
    target = config.get("text_config", config)
    for _ in range(rng.randint(1, 4)):
        key = rng.choice([*target, "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "text_config", "model_type", "hybrid_override_pattern",
                          "sliding_window", "layer_types", "use_sliding_window", "sliding_window_pattern",
                          "max_window_layers", "attn_logit_softcapping", "kv_lora_rank", "q_lora_rank",
                          "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace",
                          "n_shared_experts", "quantization_config", "interleave_moe_layer_step",
                          "intermediate_size_mlp", "attention_chunk_size", "no_rope_layers", "tie_word_embeddings",
                          "cross_attention_layers", "vision_config"])
        action = rng.random()
        if action < 0.15:
            target.pop(key, None)
        else:
            target[key] = rng.choice(_HOSTILE_JSON) if action < 0.8 else rdim(rng)
    text = json.dumps(config)
    r = rng.random()
    if r < 0.1:
        text = text[:rng.randrange(len(text))]
    elif r < 0.15:
        depth = rng.choice([10, 1000, 100_000])
        text = "[" * depth + text + "]" * depth
    elif r < 0.2:
        raw = bytearray(text.encode())
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    return text.encode()


def llm_argv(rng: random.Random) -> list[str]:
    argv = ["llm", "--gpu", rng.choice(["a10g", "l4", "a100-80gb", "h100", "t4"]),
            "--batch", str(rng.choice([1, 8, 256, 2**20])), "--input-len", str(rng.choice([1, 512, 2**20])),
            "--output-len", str(rng.choice([1, 128, 2**20]))]
    if rng.random() < 0.3:
        argv += ["--tp", str(rng.choice([1, 2, 8, 3]))]
    if rng.random() < 0.3:
        argv += ["--dtype", rng.choice(["bf16", "fp16", "fp8", "fp4", "int8", "int4"])]
    if rng.random() < 0.2:
        argv += ["--mig", "1g.10gb"]
    if rng.random() < 0.5:
        argv += ["--format", "json"]
    return argv


# ----------------------------------------------------------------------------- cases

def seed_files(zoo: list[str], folder: Path, extra: list[str] | None = None) -> list[Path]:
    files = [REPO / "examples" / "resnet18.onnx", *(Path(f) for f in extra or [])]
    for name in zoo:
        path = folder / f"{name}.onnx"
        if not path.exists():  # in another process: the forked cases would inherit the exporter's memory
            print(f"exporting zoo model {name} ...", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "lilou.cli", "zoo", "export", name, "-o", str(path),
                            "--strip-weights"], check=True, stdout=subprocess.DEVNULL)
        files.append(path)
    return files


def make_case(seed: int, index: int, seeds: list[tuple[bytes, onnx.ModelProto]]) -> tuple[str, bytes, list[str]]:
    """(kind, file bytes, argv after the file name) of case ``index``: the same for the same seed."""
    rng = random.Random(f"{seed}:{index}")
    HOSTILITY[0] = rng.choice([0.0, 0.02, 0.05, 0.1, 0.25])
    r = rng.random()
    if r < 0.1:
        return "llm-config", llm_config_mutant(rng), llm_argv(rng)
    if r < 0.6:
        kind = "structure" if r < 0.35 else "coherent"
        try:
            data = structure_mutant(rng) if kind == "structure" else coherent_mutant(rng)
        except Exception as exc:  # noqa: BLE001 - a generator bug must not stop the run
            raise RuntimeError(f"generator failed on case {index} of seed {seed}: {exc}") from exc
    else:
        raw, parsed = rng.choice(seeds)
        kind, data = ("bytes", byte_mutant(rng, raw)) if r < 0.8 else ("fields", field_mutant(rng, parsed))
    command = rng.choice(["graph", "fuse", "infer"])
    extra = ["--gpu", "a10g"] if command == "infer" else []
    if rng.random() < 0.5:
        extra += ["--format", "json"]
    if rng.random() < 0.2:
        extra += ["--batch", str(rng.choice([1, 2, 8, 2**20, 2**39]))]
    if rng.random() < 0.05:
        extra += ["--shape", f"x0={rng.choice(['1x4', '2x3x8x8', '1', '8x512'])}"]
    if rng.random() < 0.05:  # a run-time input's value (lilou.graph.input_values)
        name = rng.choice(["x0", "use_cache_branch", "sr", "input_ids", "state"])
        extra += ["--value", f"{name}={rng.choice(['true', '0', '1.5', '-1', '1e300', 'nan', '1,2,3', '', '=1'])}"]
    return kind, data, [command, *extra]


# ----------------------------------------------------------------------------- running

def case_file(argv: list[str]) -> str:
    """The case's file name: `lilou llm` takes a path ending in .json as a config, the others an ONNX file."""
    return "config.json" if argv[0] == "llm" else "m.onnx"


def _child(path: str, argv: list[str], out_path: str, err_path: str) -> None:
    """In the forked child: limits, stdout/stderr to files, then lilou.cli.main; never returns."""
    status = 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
        os.environ.pop("LILOU_DEBUG", None)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, target in ((1, out_path), (2, err_path)):
            handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(handle, fd)
            os.close(handle)
        from lilou.cli import main

        status = main([argv[0], path, *argv[1:]])
    except SystemExit as exc:  # noqa: B012 - what the interpreter would do
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - an escaped exception is the traceback the user would see
        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status if isinstance(status, int) and 0 <= status < 256 else 1)


def classify(status: int | None, sig: int | None, killed_by_us: bool, maxrss: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    if killed_by_us:
        return "hang"
    if maxrss > RSS_LIMIT or "MemoryError" in err or sig == signal.SIGKILL:
        return "memory"
    if "Traceback" in err or "Traceback (most recent call last)" in out:
        return "traceback"
    if sig is not None:
        return "crash"
    if status == 0:
        return "ok"
    if status == 2 and len(lines) == 1 and lines[0].startswith("lilou: "):
        return "input"
    if status == 1 and len(lines) == 1 and lines[0].startswith("lilou: "):
        return "internal"
    return "contract"


def _read(path: Path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def preload() -> None:
    """Import what graph/fuse/infer need once, so that each forked case starts warm (no computation here:
    a thread pool started before fork would not survive it)."""
    import lilou.api  # noqa: F401
    import lilou.cli
    import lilou.commands.fuse  # noqa: F401
    import lilou.commands.graph  # noqa: F401
    import lilou.commands.infer  # noqa: F401
    import lilou.fusion.predict  # noqa: F401
    import lilou.graph.loading  # noqa: F401
    import lilou.latency.composition.end_to_end  # noqa: F401
    import lilou.latency.kernel_model.inference  # noqa: F401

    lilou.cli.build_parser()


def run(args: argparse.Namespace) -> dict:
    preload()
    work = Path(tempfile.mkdtemp(prefix="lilou-fuzz-"))
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        (out_dir / "cases").mkdir(parents=True, exist_ok=True)
    seeds = [(p.read_bytes(), onnx.load(str(p), load_external_data=False))
             for p in seed_files(args.zoo, out_dir or work, args.file)]
    counts = dict.fromkeys(CLASSES, 0)
    by_kind: dict[str, dict[str, int]] = {}
    failures: list[dict] = []
    messages: dict[str, int] = {}
    peak_rss, peak_case = 0, None
    running: dict[int, dict] = {}
    start = time.monotonic()
    next_index = 0

    def launch(index: int) -> None:
        kind, data, argv = make_case(args.seed, index, seeds)
        case_dir = work / f"c{index}"
        case_dir.mkdir()
        path = case_dir / case_file(argv)
        path.write_bytes(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(str(path), argv, str(case_dir / "out"), str(case_dir / "err"))
        running[pid] = dict(index=index, kind=kind, argv=argv, dir=case_dir, t0=time.monotonic(), killed=False)

    def more() -> bool:
        if args.cases is not None and next_index >= args.cases:
            return False
        return args.seconds is None or time.monotonic() - start < args.seconds

    try:
        while running or more():
            while len(running) < args.workers and more():
                launch(next_index)
                next_index += 1
            pid, wait_status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                now = time.monotonic()
                for child_pid, case in running.items():
                    if not case["killed"] and now - case["t0"] > TIME_LIMIT_S:
                        case["killed"] = True
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(child_pid, signal.SIGKILL)
                time.sleep(0.005)
                continue
            case = running.pop(pid)
            maxrss = usage.ru_maxrss * 1024
            if maxrss > peak_rss:
                peak_rss, peak_case = maxrss, dict(index=case["index"], kind=case["kind"], argv=case["argv"])
            sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
            status = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None
            out, err = _read(case["dir"] / "out"), _read(case["dir"] / "err")
            verdict = classify(status, sig, case["killed"], maxrss, out, err)
            counts[verdict] += 1
            if verdict in ("input", "internal"):
                key = " ".join(err.split())[:70]
                messages[key] = messages.get(key, 0) + 1
            by_kind.setdefault(case["kind"], dict.fromkeys(CLASSES, 0))[verdict] += 1
            if verdict in (*FAILURES, "contract", "internal"):
                record = dict(index=case["index"], kind=case["kind"], verdict=verdict, status=status, signal=sig,
                              argv=["lilou", case["argv"][0], "FILE", *case["argv"][1:]],
                              seconds=round(time.monotonic() - case["t0"], 2), peak_rss_mb=round(maxrss / 2**20, 1),
                              stderr=err[-2000:])
                if out_dir:
                    name = case_file(case["argv"])
                    target = out_dir / "cases" / f"{verdict}-{case['index']}{Path(name).suffix}"
                    shutil.copyfile(case["dir"] / name, target)
                    record["file"] = str(target)
                failures.append(record)
                if args.verbose or verdict in FAILURES:
                    last = err.strip().splitlines()[-1:] or [""]
                    print(f"case {case['index']} ({case['kind']}, {' '.join(case['argv'])}): {verdict}: {last[0][:200]}",
                          file=sys.stderr)
            shutil.rmtree(case["dir"], ignore_errors=True)
    finally:
        for child_pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    summary = dict(seed=args.seed, cases=sum(counts.values()), seconds=round(time.monotonic() - start, 1),
                   counts=counts, by_kind=by_kind, peak_rss_mb=round(peak_rss / 2**20, 1), peak_case=peak_case,
                   failed=sum(counts[c] for c in FAILURES), failures=failures,
                   messages=dict(sorted(messages.items(), key=lambda kv: -kv[1])[:100]))
    if out_dir:
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=None, help="number of cases (default: until --seconds)")
    parser.add_argument("--seconds", type=float, default=None, help="stop starting cases after S seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    parser.add_argument("--out", default=None, help="folder for failing cases and summary.json")
    parser.add_argument("--zoo", action="append", default=[], metavar="NAME",
                        help="also mutate this zoo model, exported weight-free (repeatable)")
    parser.add_argument("--file", action="append", default=[], metavar="PATH",
                        help="also mutate this ONNX file, e.g. tests/data/quantized/*.onnx (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="also print contract violations")
    args = parser.parse_args(argv)
    if args.cases is None and args.seconds is None:
        args.cases = 200
    summary = run(args)
    print(f"{summary['cases']} cases in {summary['seconds']} s (seed {summary['seed']}): "
          + ", ".join(f"{k} {v}" for k, v in summary["counts"].items()) + f"; peak RSS {summary['peak_rss_mb']} MB")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
