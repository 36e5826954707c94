"""Fusion: which ONNX nodes run together as one GPU kernel, per backend.

- :mod:`lilou.fusion.partition`: kernel groups (``Partition``), fused-edge labels, convex repair.
- :mod:`lilou.fusion.backends`: ground-truth oracles (``eager`` from exporter metadata, ``tvm`` from TVM's FuseOps).
- :mod:`lilou.fusion.rules`: the rule baseline; :mod:`lilou.fusion.gnn` and friends: the GNN edge classifier.
- :mod:`lilou.fusion.tvm_replay`: TVM's FuseOps algorithm replayed on the ONNX graph, without TVM (a GNN
  feature for the ``tvm`` backend, and a baseline).
- :func:`lilou.fusion.predict.predict_partition`: the default prediction path of ``lilou fuse`` and ``lilou infer``.
"""
