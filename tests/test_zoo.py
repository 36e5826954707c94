"""Tests of the model zoo: catalogue, builders, ONNX export, weight stripping, `lilou zoo`."""
from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.zoo import build, export_onnx, get_entry, list_models, parameter_count, strip_weights
from lilou.zoo.export import SMALL_INITIALIZER_BYTES, is_stripped
from lilou.zoo.generators import sample_mlp
from lilou.zoo.hf import SPECS

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "resnet18.onnx"
# A NAS-Bench-201 net with one cell per stage: small, has BatchNorm, bias-free convs and pooling.
NAS_SMALL = {"cells_per_stage": 1}


def _external(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _nbytes(tensor: onnx.TensorProto) -> int:
    return math.prod(tensor.dims) * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _unknown_shapes(model: onnx.ModelProto) -> list[str]:
    """Node outputs that shape inference leaves without a fully static shape."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    types = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    unknown = []
    for node in inferred.graph.node:
        for name in filter(None, node.output):
            value_type = types.get(name)
            if value_type is not None and value_type.HasField("sequence_type"):
                value_type = value_type.sequence_type.elem_type
            dims = value_type.tensor_type.shape.dim if value_type is not None else None
            no_shape = not dims and (value_type is None or not value_type.tensor_type.HasField("shape"))
            symbolic = bool(dims) and not all(d.HasField("dim_value") for d in dims)
            if no_shape or symbolic:
                unknown.append(name)
    return unknown


def _graph_signature(model: onnx.ModelProto) -> list[tuple]:
    nodes = [(n.op_type, tuple(n.input), tuple(n.output)) for n in model.graph.node]
    inits = [(t.name, tuple(t.dims), t.data_type) for t in model.graph.initializer]
    return nodes + inits


# --- catalogue --------------------------------------------------------------------------------


def test_catalogue_covers_the_required_families() -> None:
    entries = list_models()
    names = [e.name for e in entries]
    assert len(entries) >= 20
    assert len(set(names)) == len(names)
    required = {"resnet18", "resnet50", "convnext-tiny", "mobilenetv2", "efficientnet-b0", "regnety-400mf",
                "vit-b16", "swin-tiny", "deit-small", "bert-base", "bert-large", "gpt2", "opt-125m",
                "t5-base-encoder", "bart-base-encoder",
                "bert_large", "gpt2_large", "gpt3_xl", "gpt3_27", "opt_13", "switchxl4",
                "cnn-0", "mlp-0", "nas201-0", "randdag-0", "darts-0"}
    assert required <= set(names)
    for entry in entries:
        assert entry.kind in ("vision", "text", "generator")
        assert entry.batch > 0
        if entry.kind == "text":
            assert entry.seq and entry.image_size is None
        if entry.kind == "vision":
            assert entry.image_size and entry.seq is None


def test_neusight_entries_use_the_class_named_in_their_config() -> None:
    assert SPECS["gpt3_27"].model_class == "GPT2LMHeadModel"
    assert SPECS["opt_13"].model_class == "OPTForCausalLM"
    assert SPECS["bert_large"].model_class == "BertLMHeadModel"
    assert SPECS["switchxl4"].model_class == "SwitchTransformersForConditionalGeneration"


@pytest.mark.slow
def test_resnet50_is_the_standard_one() -> None:
    built = build("resnet50")
    assert built.num_parameters == 25_557_032  # torchvision's resnet50 count (HF backbone 23,508,032 + fc)
    assert tuple(built.module(*built.args).shape) == (1, 1000)


# Published parameter counts (torchvision for vision models, the Hugging Face hub checkpoints for text).
KNOWN_PARAMETERS = {
    "resnet18": 11_689_512,
    "convnext-tiny": 28_589_128,
    "mobilenetv2": 3_504_872,
    "efficientnet-b0": 5_288_548,
    "regnety-400mf": 4_344_144,
    "vit-b16": 86_567_656,
    "swin-tiny": 28_288_354,
    "bert-base": 109_482_240,
    "gpt2": 124_439_808,
    "opt-125m": 125_239_296,
    "roberta-base": 124_645_632,
    "distilbert-base": 66_362_880,
    "albert-base": 11_683_584,
    "gpt-neo-125m": 125_198_592,
    "tinyllama-1.1b": 1_100_048_384,
    "bloom-560m": 559_214_592,
    "mobilevit-small": 5_578_632,
    "beit-base": 86_530_984,
    "poolformer-s12": 11_915_176,
    "segformer-b0": 3_752_694,
}


@pytest.mark.parametrize("name", sorted(KNOWN_PARAMETERS))
def test_architectures_match_their_published_sizes(name: str) -> None:
    assert parameter_count(name) == KNOWN_PARAMETERS[name]


def test_gpt3_27_has_2_7_billion_parameters_without_allocating_them() -> None:
    built = build("gpt3_27", fake=True, batch=1, seq=128)
    assert built.num_parameters == 2_651_553_280
    assert tuple(built.module(*built.args).shape) == (1, 128, 50257)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_transformers_entry_builds_and_runs_weight_free(name: str) -> None:
    entry = get_entry(name)
    built = build(name, batch=2, fake=True, **({"seq": 16} if entry.kind == "text" else {}))
    assert built.fake and all(isinstance(p, FakeTensor) for p in built.module.parameters())
    out = built.module(*built.args)  # shapes only: no weights, no compute
    assert out.shape[0] == 2
    if entry.kind == "text":
        assert out.shape[1] == 16
    wrapped = getattr(built.module, "model", None) or built.module.encoder
    assert wrapped.config._attn_implementation == "eager"


def test_switch_static_dispatch_matches_transformers() -> None:
    from transformers import SwitchTransformersConfig
    from transformers.models.switch_transformers.modeling_switch_transformers import SwitchTransformersSparseMLP

    from lilou.zoo.hf_nets import CapacitySparseMLP

    torch.manual_seed(0)
    config = SwitchTransformersConfig(d_model=16, d_ff=32, num_experts=4, expert_capacity=3)
    reference = SwitchTransformersSparseMLP(config).eval()
    static = CapacitySparseMLP(reference, config.expert_capacity)
    hidden = torch.randn(2, 10, 16)
    torch.testing.assert_close(static(hidden), reference(hidden))


# --- generators -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["cnn", "mlp", "nas201", "randdag", "darts"])
def test_generators_are_deterministic_per_seed_and_differ_across_seeds(family: str) -> None:
    def fingerprint(seed: int) -> tuple:
        module = build(f"{family}-{seed}").module
        return repr(module), tuple((k, tuple(v.shape)) for k, v in module.state_dict().items())

    assert fingerprint(3) == fingerprint(3)
    assert len({fingerprint(seed) for seed in range(4)}) > 1


@pytest.mark.slow
def test_generator_onnx_graph_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    first = onnx.load(export_onnx("randdag-5", tmp_path / "a.onnx", strip_weights=True), load_external_data=False)
    again = onnx.load(export_onnx("randdag-5", tmp_path / "b.onnx", strip_weights=True), load_external_data=False)
    other = onnx.load(export_onnx("randdag-6", tmp_path / "c.onnx", strip_weights=True), load_external_data=False)
    assert _graph_signature(first) == _graph_signature(again)
    assert _graph_signature(first) != _graph_signature(other)


def test_nas201_arch_string() -> None:
    from lilou.zoo.generators import NAS201Spec

    spec = NAS201Spec(ops=("nor_conv_3x3", "none", "skip_connect", "avg_pool_3x3", "nor_conv_1x1", "none"))
    assert spec.arch_str == "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"


# --- export -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nas_exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same small NAS-Bench-201 net exported with and without weights."""
    folder = tmp_path_factory.mktemp("nas")
    built = build("nas201-1", **NAS_SMALL)
    full = export_onnx(built, folder / "full.onnx")
    stripped = export_onnx(built, folder / "nas.onnx", strip_weights=True)
    return full, stripped


@pytest.mark.slow
def test_export_is_valid_onnx_with_exporter_metadata(nas_exports: tuple[Path, Path]) -> None:
    full, _ = nas_exports
    onnx.checker.check_model(str(full), full_check=True)
    model = onnx.load(full)
    keys = {prop.key for node in model.graph.node for prop in node.metadata_props}
    assert {"pkg.torch.onnx.fx_node", "namespace"} <= keys
    ops = {node.op_type for node in model.graph.node}
    assert "BatchNormalization" in ops  # optimize=False: not folded into Conv, as in eager
    assert [i.name for i in model.graph.input] == ["x"]
    assert {p.key: p.value for p in model.metadata_props}["lilou.zoo.weights"] == "inline"


@pytest.mark.slow
def test_stripped_export_keeps_names_shapes_and_types_but_no_weight_bytes(nas_exports: tuple[Path, Path]) -> None:
    full, stripped_path = nas_exports
    stripped = onnx.load(stripped_path, load_external_data=False)
    reference = onnx.load(full)
    assert [(t.name, list(t.dims), t.data_type) for t in stripped.graph.initializer] == [
        (t.name, list(t.dims), t.data_type) for t in reference.graph.initializer
    ]
    big = [t for t in reference.graph.initializer if _nbytes(t) > SMALL_INITIALIZER_BYTES]
    assert big, "the test model should have large initializers"
    for tensor in stripped.graph.initializer:
        if _nbytes(tensor) > SMALL_INITIALIZER_BYTES:
            assert is_stripped(tensor)
            assert _external(tensor) == {"location": "nas.weights", "offset": "0", "length": str(_nbytes(tensor))}
        else:
            assert tensor.data_location != onnx.TensorProto.EXTERNAL and tensor.raw_data
    assert not (stripped_path.parent / "nas.weights").exists()
    saved = full.stat().st_size - stripped_path.stat().st_size
    assert saved > 0.95 * sum(_nbytes(t) for t in big)
    assert _unknown_shapes(stripped) == []


@pytest.mark.slow
def test_strip_weights_function_matches_the_export(nas_exports: tuple[Path, Path]) -> None:
    full, stripped_path = nas_exports
    by_function = strip_weights(onnx.load(full), location="nas.weights")
    by_export = onnx.load(stripped_path, load_external_data=False)
    assert list(by_function.graph.initializer) == list(by_export.graph.initializer)


@pytest.mark.slow
def test_weight_free_build_exports_the_same_graph_as_a_real_one(tmp_path: Path) -> None:
    tiny_gpt = {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 1000}
    real = build("gpt2", seq=16, **tiny_gpt)
    fake = build("gpt2", seq=16, fake=True, **tiny_gpt)
    a = onnx.load(export_onnx(real, tmp_path / "m.onnx", strip_weights=True), load_external_data=False)
    (tmp_path / "fake").mkdir()
    b = onnx.load(export_onnx(fake, tmp_path / "fake" / "m.onnx", strip_weights=True), load_external_data=False)
    assert _graph_signature(a) == _graph_signature(b)  # nodes, initializer names, dims and types
    big = [t for t in a.graph.initializer if _nbytes(t) > SMALL_INITIALIZER_BYTES]
    assert big == [t for t in b.graph.initializer if _nbytes(t) > SMALL_INITIALIZER_BYTES]
    # Small *parameters* of a fake build have no values, so they stay external there.
    assert all(is_stripped(t) for t in b.graph.initializer)
    assert {"MatMul", "Softmax"} <= {n.op_type for n in a.graph.node}  # eager attention, no fused SDPA
    with pytest.raises(LilouInputError):
        export_onnx(fake, tmp_path / "full.onnx")  # fake weights cannot be written


def test_mlp_family_includes_bias_free_per_token_blocks(tmp_path: Path) -> None:
    """mlp-2 is a T5-style feed-forward block: (batch, tokens, features) input, no bias, ReLU."""
    built = build("mlp-2", batch=2)
    assert tuple(built.args[0].shape) == (2, 16, built.module.layers[0].in_features)
    model = onnx.load(export_onnx("mlp-2", tmp_path / "mlp.onnx", strip_weights=True), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert "MatMul" in ops and "Gemm" not in ops and "Add" not in ops and "Relu" in ops
    assert {sample_mlp(seed).tokens for seed in range(16)} == {0, 16, 64}


def test_torchscript_exporter_option(tmp_path: Path) -> None:
    model = onnx.load(export_onnx("mlp-2", tmp_path / "mlp.onnx", batch=3, dynamo=False))
    onnx.checker.check_model(model)
    assert {p.key: p.value for p in model.metadata_props}["lilou.zoo.exporter"] == "torchscript"
    assert {n.op_type for n in model.graph.node} & {"Gemm", "MatMul"}
    assert _unknown_shapes(model) == []
    with pytest.raises(LilouInputError, match="dynamo"):
        export_onnx("mlp-2", tmp_path / "x.onnx", optimize=True, dynamo=False)


def test_shipped_example_is_weight_free_and_shape_complete() -> None:
    assert EXAMPLE.stat().st_size < 1_000_000
    model = onnx.load(EXAMPLE, load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["lilou.zoo.model"] == "resnet18"
    assert props["lilou.zoo.weights"] == "stripped"
    assert props["lilou.zoo.inputs"] == "pixel_values=1x3x224x224"
    big = [t for t in model.graph.initializer if _nbytes(t) > SMALL_INITIALIZER_BYTES]
    assert len(big) > 10 and all(is_stripped(t) for t in big)
    # fp32 parameters plus BatchNorm running mean and variance (9,600 values)
    assert sum(_nbytes(t) for t in model.graph.initializer) == 4 * (11_689_512 + 9_600)
    assert _unknown_shapes(model) == []


# --- bad input and the CLI --------------------------------------------------------------------


def test_bad_build_input_is_a_clear_error() -> None:
    with pytest.raises(LilouInputError, match="batch"):
        build("resnet18", batch=0)
    with pytest.raises(LilouInputError, match="up to 512"):
        build("bert-base", seq=4096)
    with pytest.raises(LilouInputError, match="sequence"):
        build("resnet18", seq=16)


def test_cli_unknown_model_exits_2_with_suggestions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "export", "resnet-50", "-o", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "resnet50" in err and len(err.strip().splitlines()) == 1


def test_cli_rejects_bad_batch_and_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "export", "mlp-0", "-o", str(tmp_path / "m.onnx"), "--batch", "0"]) == 2
    assert main(["zoo", "export", "mlp-0", "-o", str(tmp_path / "missing" / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "batch" in err and "does not exist" in err


def test_cli_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["zoo", "list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"name", "family", "kind", "batch", "seq", "image_size", "description"} == set(rows[0])
    assert len(rows) == len(list_models())


def test_decomposition_corpus_lists_the_batch_it_builds_with() -> None:
    # `zoo list` showed 1 for every corpus entry; token inputs export with 2 rows, loss logits with 12.
    corpus = [entry for entry in list_models() if entry.family == "decomp"]
    batches = {entry.name: entry.batch for entry in corpus}
    assert batches["op-silu"] == 2 and batches["op-cross-entropy"] == 12 and batches["conv-silu"] == 1
    for entry in corpus:
        assert build(entry.name).args[0].shape[0] == entry.batch, entry.name


@pytest.mark.slow
def test_a_dynamic_batch_export_takes_any_batch(tmp_path: Path) -> None:
    """Traced at the entry's batch 1, torch.export specialised the size-1 dimension and baked it into GPT-2's reshapes:
    the file declared a symbolic batch and refused every other one ("turns (512, 2304) into (1, 128, 2304)")."""
    from lilou.graph.dag import load_graph

    path = export_onnx("gpt2", tmp_path / "gpt2.onnx", seq=32, strip_weights=True, dynamic_batch=True)
    model = onnx.load(str(path), load_external_data=False)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch in (1, 4):
        graph = load_graph(path, batch=batch)
        assert graph.inputs[0].shape == (batch, 32)
        logits = next(t for t in graph.outputs if t.name == "logits")
        assert logits.shape == (batch, 32, 50257)


@pytest.mark.slow
def test_cli_export_is_quiet_and_writes_the_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp.onnx"
    assert main(["zoo", "export", "mlp-0", "-o", str(out), "--batch", "4", "--strip-weights"]) == 0
    captured = capfd.readouterr()
    assert "[torch.onnx]" not in captured.out + captured.err
    assert "torchvision" not in captured.out + captured.err
    model = onnx.load(out, load_external_data=False)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
