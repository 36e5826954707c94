"""ONNX shape inference in a forked child with a memory cap and a time limit.

ONNX's C++ shape inference trusts the file: a few hundred bytes with a negative Resize scale
feeding a broadcast, or a mutated constant in a reshape chain, make it allocate gigabytes (the
fuzzer found files of 824 bytes that get a process killed by the kernel), and malformed
equations can keep it from returning. No check before it can name every such case, so it runs in
a child process whose address space is capped at :data:`MEMORY_BUDGET` above the parent's and
that is killed after :data:`TIME_LIMIT_S` (the budget grows with the model's own size, which ONNX copies
twice; the child first drops the bytes of weights too large for any inference to read, :func:`without_weight_bytes`,
so a real model's weights stay well inside it). A child that runs out of memory or time, or aborts (ONNX asserts on
some malformed dimensions), is bad input, said in one line (the child's own output goes to /dev/null); any other
outcome (the inferred model, or ONNX's own error) is exactly what the in-process call gives. Where ``os.fork`` does
not exist the call runs in-process.

While the child infers, the parent is idle: :func:`meanwhile` hands it work to do then (a command's later imports
and checkpoint loads), so a fresh process spends the child's time once, not twice. :func:`infer_then` also runs the
work that follows inference on the inferred model in the child (Lilou's own shape completion, which folds the
file's constants: under the same limits, and beside the parent's work). :class:`GuardedChild` is the child itself,
which :mod:`lilou.graph.reading` also uses to shape a whole file (checks and write-backs included) while the caller
goes on; inside such a child, guarded inference runs in-process.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import shape_inference

from lilou.errors import LilouInputError, OutOfTimeError
from lilou.graph.loading import point_at_external_data

#: Memory the child may map beyond what the parent already has: a file under 1 MB must not take Lilou past 1 GB.
MEMORY_BUDGET = 512 * 2**20
TIME_LIMIT_S = 60.0
#: ONNX errors passed back to the parent as themselves, so callers handle them as before.
_ERRORS = {"InferenceError": shape_inference.InferenceError, "ValidationError": onnx.checker.ValidationError,
           "RuntimeError": RuntimeError, "ValueError": ValueError}
#: What a ``finish`` raises, passed back as itself (anything else as a RuntimeError that names it).
_FINISH_ERRORS = {"LilouInputError": LilouInputError, **_ERRORS}
#: Inside a guarded child: its memory budget (guarded inference then runs in-process); 0 elsewhere.
_INSIDE_GUARD = 0
#: Work the parent does while the next child infers (:func:`meanwhile`).
_PENDING: contextvars.ContextVar[tuple[Callable[[], object], ...]] = contextvars.ContextVar("pending", default=())


@contextlib.contextmanager
def meanwhile(*work: Callable[[], object]) -> Iterator[None]:
    """Within the block, the first guarded inference runs ``work`` in the parent while its child infers.

    Only a head start: ``work`` runs at most once and may not run at all (no fork, no inference, a graph read
    without it), and what it raises is dropped, so it must be something the caller would do later anyway (an
    import, a cached load) whose errors surface again there."""
    token = _PENDING.set(_PENDING.get() + work)
    try:
        yield
    finally:
        _PENDING.reset(token)


def run_pending() -> None:
    """Run (once) the work :func:`meanwhile` set, dropping what it raises: a child is busy now."""
    work = _PENDING.get()
    _PENDING.set(())
    for task in work:
        with contextlib.suppress(Exception):  # a head start only: the caller's own later call raises it again
            task()


def infer_shapes(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **options)``, guarded (see the module docstring)."""
    return infer_then(model, None, **options)[0]


class FinishFailed(Exception):
    """What the ``finish`` of :func:`infer_then` raised: ``error``, an ONNX error or a :class:`LilouInputError` (as
    raised), or a RuntimeError naming any other exception."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def infer_then(model: onnx.ModelProto, finish: Callable[[onnx.ModelProto], object] | None,
               **options) -> tuple[onnx.ModelProto, object]:
    """:func:`infer_shapes`, then ``finish(inferred)`` in the same child (Lilou's own shape completion: it then runs
    under the child's limits, beside the parent's :func:`meanwhile` work). ``finish`` may change the inferred
    graph's ``value_info`` and nothing else, and returns a JSON value; returns the inferred model and that value
    (None without ``finish``). What ``finish`` raises comes back as :class:`FinishFailed`. In a process with other
    threads ``finish`` runs in the parent, after the guarded inference."""
    if not hasattr(os, "fork"):
        inferred = shape_inference.infer_shapes(model, **options)
        return inferred, _finished(finish, inferred)
    if _INSIDE_GUARD:
        return _in_process(model, finish, options)
    if finish is not None and _other_threads():
        # A process with other threads (the service's workers) runs ``finish`` itself: a forked child keeps the
        # locks those threads held (a module one of them was importing), which Python code in the child could wait
        # on forever; and ``finish``'s caches (shape completion's evaluators) last in the parent.
        inferred = infer_shapes(model, **options)
        return inferred, _finished(finish, inferred)
    # ONNX serialises the model to hand it to C++, then parses it: a model's own bytes take three times their size;
    # a finish that infers a copy of it again (shape completion) as many more.
    budget = MEMORY_BUDGET + (3 if finish is None else 7) * model.ByteSize()
    child = GuardedChild.start(budget, lambda: _answer(model, options, finish))
    try:
        run_pending()
    finally:
        payload, status = child.collect()
    return _result(payload, status, budget, model)


def _in_process(model: onnx.ModelProto, finish: Callable[[onnx.ModelProto], object] | None,
                options: dict) -> tuple[onnx.ModelProto, object]:
    """:func:`infer_then` inside a guarded child (a graph read in one, :mod:`lilou.graph.reading`): already under its
    limits, so in this process, and on a copy without node metadata as a child of its own would (the answer is the
    same, ONNX just has less to serialise)."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    return _result(_answer(work, options, finish), 0, _INSIDE_GUARD or MEMORY_BUDGET, model)


class GuardedChild:
    """A forked child computing an answer (bytes) under a memory cap and the time limit (see the module docstring),
    while this process goes on; :meth:`collect` waits for the answer, :meth:`close` gives up on it."""

    def __init__(self, pid: int, fd: int, deadline: float) -> None:
        self.pid, self.fd, self.deadline = pid, fd, deadline

    @classmethod
    def start(cls, budget: int, produce: Callable[[], bytes]) -> GuardedChild:
        """Fork; the child maps at most ``budget`` bytes more than this process, writes ``produce()`` and leaves
        (any exception: status 1, no answer). Inside the child, guarded inference runs in-process."""
        global _INSIDE_GUARD
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, leave without running the parent's cleanup
            code = 0
            try:
                os.close(read_fd)
                _silence_output()
                _cap_address_space(budget)
                _INSIDE_GUARD = budget
                answer = produce()
                with os.fdopen(write_fd, "wb") as out:  # its length first: a whole answer is known as such
                    out.write(len(answer).to_bytes(8, "little"))
                    out.write(answer)
            except BaseException:  # noqa: BLE001 - nothing may escape a forked child
                code = 1
            os._exit(code)
        os.close(write_fd)
        return cls(pid, read_fd, time.monotonic() + TIME_LIMIT_S)

    def collect(self) -> tuple[bytes | None, int | None]:
        """The child's answer (None when it did not finish within the time limit: it is then killed; b"" when it
        ended without a whole one) and its exit status: None where the host reaped the child before this process
        could (SIGCHLD ignored, or a handler of its own that waits for any child), 0 then for a whole answer, which
        the child writes last before it exits."""
        try:
            payload = _read(self.fd, self.deadline, self.pid)
        except BaseException:  # interrupted (KeyboardInterrupt, a bad descriptor): the child is not left running
            _kill(self.pid)
            raise
        finally:
            os.close(self.fd)
            status = _reaped(self.pid)
        if payload is None:
            return None, status
        answer = _whole(payload)
        if answer is not None and status is None:
            status = 0
        return (b"" if answer is None else answer), status

    def close(self) -> None:
        """Give up on the answer: kill the child and reap it."""
        _kill(self.pid)
        os.close(self.fd)
        _reaped(self.pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _reaped(pid: int) -> int | None:
    """Wait for child ``pid`` to end and reap it (no zombie left); its status, or None where the host reaped it
    first: with SIGCHLD ignored the kernel does, and a host handler calling ``waitpid(-1, ...)`` may (a supervisor
    loop, asyncio's FastChildWatcher). ``os.waitpid`` then raised ChildProcessError from every path-based predict
    (audit ua43c, finding 4)."""
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _whole(payload: bytes) -> bytes | None:
    """The answer a child's ``payload`` frames (its 8-byte length, then it), or None when it is cut short."""
    if len(payload) < 8 or int.from_bytes(payload[:8], "little") != len(payload) - 8:
        return None
    return payload[8:]


def _other_threads() -> bool:
    return threading.active_count() > 1


def may_fork_here() -> bool:
    """Whether work may go to a forked child from here: ``fork`` exists, this is not a guarded child already, and
    no other thread holds locks a child would inherit (the service's workers)."""
    return hasattr(os, "fork") and not _INSIDE_GUARD and not _other_threads()


def _finished(finish: Callable[[onnx.ModelProto], object] | None, inferred: onnx.ModelProto) -> object:
    """``finish(inferred)`` with what it raises as :class:`FinishFailed` (MemoryError as it is)."""
    if finish is None:
        return None
    try:
        return finish(inferred)
    except MemoryError:
        raise
    except (LilouInputError, *_ERRORS.values()) as exc:
        raise FinishFailed(exc) from None
    except Exception as exc:  # noqa: BLE001 - a bug: named, and raised in the parent as an internal error
        raise FinishFailed(RuntimeError(f"{type(exc).__name__}: {exc}")) from None


def _answer(model: onnx.ModelProto, options: dict, finish: Callable[[onnx.ModelProto], object] | None) -> bytes:
    """What the child writes: b"V" or b"O", the length and JSON of ``finish``'s value, then the inferred graph's
    inputs, outputs and value_info (V: a model without subgraphs or functions, whose nodes neither inference nor
    ``finish`` change) or the whole inferred model but its initializers (O); b"E" and an ONNX error; b"F" and what
    ``finish`` raised; or b"M"."""
    try:
        without_weight_bytes(model)  # the child's own copy: ONNX serialises it whole, and only the dims matter
        flat = is_flat(model)
        if flat:
            for node in model.graph.node:  # the child's own copy: what inference never reads need not go through it
                node.ClearField("metadata_props")  # (the dynamo exporter's stack traces: 4 of BERT-large's 4.3 MB)
        inferred = shape_inference.infer_shapes(model, **options)
    except MemoryError:
        return b"M"
    except tuple(_ERRORS.values()) as exc:
        return b"E" + _error_text(exc, _ERRORS)
    try:
        extra = _finished(finish, inferred)
    except MemoryError:
        return b"M"
    except FinishFailed as failed:
        return b"F" + _error_text(failed.error, _FINISH_ERRORS)
    if flat:
        answer = onnx.GraphProto()
        answer.input.extend(inferred.graph.input)
        answer.output.extend(inferred.graph.output)
        answer.value_info.extend(inferred.graph.value_info)
    else:
        answer = inferred
        del answer.graph.initializer[:]  # the parent has them; do not copy weights through the pipe
    head = json.dumps(extra).encode()
    return (b"V" if flat else b"O") + len(head).to_bytes(8, "little") + head + answer.SerializeToString()


#: Where the child points an initializer whose bytes it dropped (:func:`without_weight_bytes`); never read.
CHILD_STRIPPED_LOCATION = "lilou-shaping-child-stripped"


def without_weight_bytes(model: onnx.ModelProto) -> int:
    """Drop, in place, the bytes of every initializer the shaping never reads: each becomes external data (at
    :data:`CHILD_STRIPPED_LOCATION`, never written) with its name, dims and type, as a weight-stripped file's
    (:func:`lilou.zoo.export.strip_weights`). Returns how many bytes were dropped.

    The shaping reads the values of inline tensors of at most
    :data:`lilou.graph.shape_completion.MAX_VALUE_ELEMENTS` elements (constant folding, the zero-bias check of the
    contrib writer; every other reader takes fewer), so only larger ones go, and only where their bytes are exactly
    what the dims declare (anything else stays for the checks to refuse). Their values never change a shape, and the
    parent keeps its own full copies: the shaping of such a copy serialises (for ONNX's C++ inference) and copies
    its weights' dims only, so a GPT-2 with its 621 MB of weights inline needs no more memory than its weight-free
    export. A guarded child's own copy, in :func:`_answer` and in :mod:`lilou.graph.reading`'s child."""
    dropped = 0
    for tensor in model.graph.initializer:
        nbytes = _droppable_bytes(tensor)
        if nbytes:
            point_at_external_data(tensor, CHILD_STRIPPED_LOCATION, nbytes)
            dropped += nbytes
    return dropped


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` as :func:`without_weight_bytes` leaves it, made without copying the bytes it drops (the
    in-process shaping's, :mod:`lilou.graph.reading`: ``model`` is left as it is)."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        nbytes = _droppable_bytes(tensor)
        if not nbytes:
            copy.graph.initializer.append(tensor)
            continue
        stripped = copy.graph.initializer.add()
        _copy_fields(tensor, stripped, skip="raw_data")
        point_at_external_data(stripped, CHILD_STRIPPED_LOCATION, nbytes)
    return copy


def _copy_fields(source, target, skip: str) -> None:
    """Every field set in protobuf message ``source`` but ``skip``, copied into the empty ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _droppable_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of ``tensor`` :func:`without_weight_bytes` drops: its raw data if it has more than
    :data:`lilou.graph.shape_completion.MAX_VALUE_ELEMENTS` elements, exactly as many bytes as they need, and is
    neither external nor strings nor packed; 0 for any other."""
    from lilou.graph.shape_completion import MAX_VALUE_ELEMENTS

    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type == onnx.TensorProto.STRING \
            or tensor.data_type in _PACKED_TYPES or any(d < 0 for d in tensor.dims) \
            or math.prod(tensor.dims) <= MAX_VALUE_ELEMENTS or not tensor.raw_data:
        return 0
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    nbytes = math.prod(tensor.dims) * itemsize
    return nbytes if len(tensor.raw_data) == nbytes else 0


def bytes_dropped(tensor: onnx.TensorProto) -> bool:
    """Whether :func:`without_weight_bytes` dropped the bytes of ``tensor``."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        entry.key == "location" and entry.value == CHILD_STRIPPED_LOCATION for entry in tensor.external_data)


_PACKED_TYPES = frozenset(getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
                          if hasattr(onnx.TensorProto, n))


def _error_text(exc: Exception, kinds: dict[str, type[Exception]]) -> bytes:
    name = next(n for n, kind in kinds.items() if isinstance(exc, kind))
    return name.encode() + b"\n" + str(exc).encode("utf-8", "replace")


def _silence_output() -> None:
    """Point the child's stdout and stderr at /dev/null: a failed C++ assertion in ONNX prints its own line
    before the abort, and the user gets Lilou's one line instead."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


def _cap_address_space(budget: int) -> None:
    """RLIMIT_AS at what the process maps now plus ``budget``; left as it is where that cannot be read or set
    (no /proc, a lower hard limit), so the time limit still holds."""
    import resource

    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = mapped + budget
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        pass


def _read(fd: int, deadline: float, pid: int) -> bytes | None:
    """The child's whole answer, or None when it did not finish by ``deadline`` (``time.monotonic``; it is then
    killed)."""
    chunks = []
    # poll, not select: select refuses a descriptor above 1023, which a long-running host with many files or
    # sockets open hands out (a ValueError from every read)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        ready = poller.poll(max(left, 0.0) * 1000)
        if not ready:
            _kill(pid)
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def is_flat(model: onnx.ModelProto) -> bool:
    """No subgraph (If, Loop, Scan) and no model-local function: inference adds value_info and output types to the
    main graph and changes nothing else."""
    if model.functions:
        return False
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return not any(attr.type in kinds for node in model.graph.node for attr in node.attribute)


def _result(payload: bytes | None, status: int | None, budget: int, model: onnx.ModelProto
            ) -> tuple[onnx.ModelProto, object]:
    """The inferred model and ``finish``'s value the child's ``payload`` stands for, or the error it reports
    (``model``: what it inferred)."""
    # (a child that died while writing is judged by its status)
    if payload is not None and payload[:1] in (b"V", b"O") and status == 0:
        size = int.from_bytes(payload[1:9], "little")
        extra = json.loads(payload[9:9 + size])
        body = payload[9 + size:]
        inferred = onnx.ModelProto()
        if payload.startswith(b"V"):
            answer = onnx.GraphProto()
            answer.ParseFromString(body)
            inferred.CopyFrom(model)
            for name in ("input", "output", "value_info"):
                inferred.graph.ClearField(name)
                getattr(inferred.graph, name).extend(getattr(answer, name))
        else:
            inferred.ParseFromString(body)
            del inferred.graph.initializer[:]  # sent back empty: shape inference does not change them
            inferred.graph.initializer.extend(model.graph.initializer)
        return inferred, extra
    if payload is not None and payload.startswith(b"F"):
        name, _, message = payload[1:].partition(b"\n")
        raise FinishFailed(_FINISH_ERRORS[name.decode()](message.decode("utf-8", "replace")))
    if payload is not None and payload.startswith(b"E"):
        name, _, message = payload[1:].partition(b"\n")
        raise _ERRORS[name.decode()](message.decode("utf-8", "replace"))
    raise child_failure(payload, status, budget)


def child_failure(payload: bytes | None, status: int | None, budget: int) -> Exception:
    """The error for a child that gave no answer: out of time (``payload`` None) or memory (b"M", or killed), an
    abort inside ONNX, or an exit without one (``status`` None: reaped by the host, so why is unknown)."""
    if payload is None:
        return OutOfTimeError(f"ONNX shape inference did not finish within {TIME_LIMIT_S:.0f} s on this model; "
                               "the file is malformed or far larger than a real model")
    memory = f"needs more than {budget // 2**20} MiB of memory"
    if status is None and payload != b"M":
        return LilouInputError(f"ONNX shape inference ended without an answer on this model (it aborted on a failed "
                               f"check of the file, or it {memory}; this process's children are reaped by the host, "
                               "so its exit status is unknown); the file is malformed or its dimensions are not "
                               "realistic")
    if payload == b"M" or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        return LilouInputError(f"ONNX shape inference {memory} on this model (negative or huge dimensions, or a "
                               "malformed file); its shapes are not realistic")
    if os.WIFSIGNALED(status):  # SIGABRT: a failed assertion inside ONNX, or an allocation failure it cannot raise
        return LilouInputError(f"ONNX shape inference aborted on this model (signal {os.WTERMSIG(status)}: one of "
                               f"its own checks failed, or it {memory}); the file is malformed or its dimensions are "
                               "not realistic")
    return RuntimeError(f"shape inference ended without an answer (status {status})")
