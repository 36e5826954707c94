"""``KernelEstimate.work_ms`` is the GPU time the launch queue ran for the kernel: its share of the latency less the
wait for the host (session 42's audit: it was the work before the fitted end-to-end scale, 0.156 ms against a share
of 0.144 ms with no wait on ResNet-50 on an A10G, and its sum was not rank's ``gpu_work_ms``)."""
from __future__ import annotations

import pytest

from lilou.api import Predictor


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


@pytest.mark.parametrize("gpu, batch", [("a10g", 8), ("h100-sxm", 1)])
def test_work_plus_wait_is_the_kernel_s_share(predictor, zoo_onnx, gpu, batch):
    model = str(zoo_onnx("resnet50", batch=1, dynamic_batch=True))
    prediction = predictor.predict(model, gpu, batch=batch)
    scale = predictor.model.overhead.scale
    assert scale != 1.0
    for kernel in prediction.kernels:
        assert kernel.work_ms + kernel.host_wait_ms == pytest.approx(kernel.latency_ms, abs=2e-6)
        assert kernel.work_ms == pytest.approx(scale * kernel.alone_ms, rel=1e-12)
    (entry,) = predictor.rank(model, [gpu], batch=batch).entries
    assert sum(k.work_ms for k in prediction.kernels) == pytest.approx(entry.gpu_work_ms, abs=1e-4)
    assert sum(k.work_ms for k in prediction.kernels) <= prediction.latency_ms + 1e-4
