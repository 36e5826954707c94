"""Evaluation: the kernel model and the end-to-end composition against real measurements.

Leave-one-GPU-out and leave-one-architecture-out folds (:mod:`.folds`, :mod:`.table_folds`), the
end-to-end evaluation of `lilou eval` (:mod:`.e2e_eval`, over the labelled workloads of :mod:`.e2e_workloads`
with the parts of each fold from :mod:`.fold_parts`, its rows and summaries in :mod:`.e2e_results`, scored by
:mod:`.scores`), residual diagnostics (:mod:`.diagnostics`),
how measured kernels scale between two GPUs (:mod:`.cross_gpu`) and the
baselines every figure is shown beside (:mod:`.roofline`, :mod:`.neusight_baseline`). Nothing at inference
time imports it.
"""
