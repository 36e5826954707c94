"""Latency: kernel groups in, per-kernel GPU work and end-to-end latency on any device out.

Three stages, imports pointing down the list:

- :mod:`lilou.latency.kernel_model`: what a kernel and a device are to the model (features, precision
  units, measured coverage), the per-kernel network, its training and its torch-free inference;
- :mod:`lilou.latency.composition`: a whole graph's kernels on many devices at once, the memory-bound
  fallback, monotonicity, and the launch overhead fitted on real end-to-end labels;
- :mod:`lilou.latency.evaluation`: folds over GPUs and architectures, `lilou eval`, diagnostics and the
  baselines every figure is shown beside.
"""
