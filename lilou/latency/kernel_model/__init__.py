"""The per-kernel model: one kernel group and one device in, its GPU work out.

What a kernel is (:mod:`.kernel`: the ONNX nodes of a group -> FLOPs, bytes, main-op shape) and what a
device is to it (:mod:`.features`: device-normalised features, the roofline at the peak of the unit that
runs the kernel, :mod:`.precision` and :mod:`.coverage`); the network (:mod:`.model`, trained through
:mod:`.lit_module`, :mod:`.training` and the data modules over NeuSight's rows or the whole kernel table)
and its torch-free twin (:mod:`.inference`) that serves the shipped checkpoints. Imports no other stage
of :mod:`lilou.latency`.
"""
