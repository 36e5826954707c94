"""An ensemble kernel model (``ensemble: 2``): the geometric mean of its members, the same in torch and numpy."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lilou.hardware import resolve_device  # noqa: E402
from lilou.latency.kernel_model.features import UNITS, DeviceColumns, KernelBatch, feature_names  # noqa: E402
from lilou.latency.kernel_model.inference import KernelModel  # noqa: E402
from lilou.latency.kernel_model.kernel import describe_kernel  # noqa: E402
from lilou.latency.kernel_model.model import KernelLatencyEnsemble, KernelLatencyNet  # noqa: E402
from lilou.latency.kernel_model.predictor import KernelLatencyPredictor  # noqa: E402
from lilou.latency.kernel_model.table_kernels import row_nodes  # noqa: E402

GROUPS, TYPE_GROUPS = ("family", "waves", "precision"), ("family", "shape", "waves")


def _net(seed: int) -> KernelLatencyNet:
    torch.manual_seed(seed)
    sizes = len(feature_names(GROUPS)), len(feature_names(TYPE_GROUPS))
    net = KernelLatencyNet(*sizes, hidden=(8, 8), power_limited=True, power_duration=True,
                           num_timings=2, floor_units=len(UNITS))
    with torch.no_grad():
        net.log_floor.normal_(-4.0, 0.5)
    return net


def _predictor(net) -> KernelLatencyPredictor:
    sizes = len(feature_names(GROUPS)), len(feature_names(TYPE_GROUPS))
    size = len(net.members) if isinstance(net, KernelLatencyEnsemble) else 1
    return KernelLatencyPredictor(net, GROUPS, TYPE_GROUPS, {
        "num_features": sizes[0], "num_type_features": sizes[1], "hidden": [8, 8], "power_limited": True,
        "power_duration": True, "num_timings": 2, "floor_units": len(UNITS), "ensemble": size})


def _bf16_gemms() -> tuple[KernelBatch, DeviceColumns]:
    """Decode- to prefill-sized BF16 GEMMs of a Llama-3-8B MLP (AIConfigurator's shapes) on an H200 and an L40S."""
    rows = [{"family": "gemm", "dtype": "bf16", "op": "gemm", "m": m, "n": 14336, "k": 4096} for m in (1, 64, 4096)]
    kernels = KernelBatch.from_specs([describe_kernel(row_nodes(row)) for row in rows] * 2)
    devices = [resolve_device("h200")] * 3 + [resolve_device("l40s")] * 3
    return kernels, DeviceColumns.from_devices(devices, ["bf16_tensor"] * 6)


def test_an_ensemble_is_the_geometric_mean_of_its_members_in_torch_and_numpy(tmp_path) -> None:
    first, second = _net(0), _net(1)
    kernels, devices = _bf16_gemms()
    one, two = _predictor(first).predict(kernels, devices), _predictor(second).predict(kernels, devices)
    ensemble = _predictor(KernelLatencyEnsemble([first, second]))
    both = ensemble.predict(kernels, devices)
    assert both.work_ms == pytest.approx(np.sqrt(one.work_ms * two.work_ms), rel=1e-5)
    assert both.floor_ms == pytest.approx(np.sqrt(one.floor_ms * two.floor_ms), rel=1e-5)
    assert not np.allclose(one.work_ms, two.work_ms, rtol=1e-3)  # the members differ: the mean is not one of them

    ensemble.save(tmp_path / "model")
    numpy_model = KernelModel.load(tmp_path / "model")
    times = numpy_model.predict(kernels, devices)
    assert times.work_ms == pytest.approx(both.work_ms, rel=1e-5)
    assert times.latency_ms == pytest.approx(both.latency_ms, rel=1e-5)
    assert times.kernel_type.tolist() == both.kernel_type.tolist()
    reloaded = KernelLatencyPredictor.load(tmp_path / "model").predict(kernels, devices)
    assert reloaded.latency_ms == pytest.approx(both.latency_ms, rel=1e-6)


def test_a_single_net_checkpoint_keeps_its_keys(tmp_path) -> None:
    """``ensemble: 1`` saves the net's own state (no ``members.`` prefix), so checkpoints made before ensembles load."""
    from safetensors.numpy import load_file

    net = _net(0)
    _predictor(net).save(tmp_path / "model")
    keys = load_file(tmp_path / "model" / "model.safetensors").keys()
    assert "trunk.0.weight" in keys and not any(k.startswith("members.") for k in keys)
    kernels, devices = _bf16_gemms()
    assert KernelModel.load(tmp_path / "model").predict(kernels, devices).latency_ms == pytest.approx(
        _predictor(net).predict(kernels, devices).latency_ms, rel=1e-5)
