"""Measurement on a real device: `lilou profile ops` times a sweep of single operators with PyTorch and writes
them as kernel-table rows with their provenance (`lilou data add` then makes them a source of the table).

This stage measures; it never predicts. It imports torch (only here: prediction stays torch-free) and, of Lilou,
only the kernel-table schema it writes (:mod:`lilou.data.kernel_schema`) and the package's errors. Modules:
:mod:`sweep` (which operators and shapes, no torch), :mod:`timing` (how one call is timed), :mod:`runner` (builds
each operator's tensors, times it, makes the rows) and :mod:`provenance` (what ran where, written beside the rows).
"""
