"""End-to-end composition: per-kernel work of a whole graph -> its latency on each device.

:mod:`.end_to_end` prices every kernel group of a partition on many devices at once (routing each kernel
to the FP32 or the tensor-core model), :mod:`.monotone` keeps predictions monotonic in size and across MIG
slices, :mod:`.fallback` prices what no model has measurements for, :mod:`.overhead` adds the host's launch
waits, fitted on real end-to-end labels by :mod:`.calibrate`; :mod:`.breakdown` names kernel categories.
Imports :mod:`lilou.latency.kernel_model` only.
"""
