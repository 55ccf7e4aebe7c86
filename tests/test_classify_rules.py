"""The classifier's rules at their edges, each through ``classify`` on a fixture built for it: config numbers at the
limits of what a real config can say, the warnings that name a mixed or misdeclared checkpoint, the pickle message's
cut-off, and what the tensors alone say when no config does."""

from __future__ import annotations

import copy

import pytest

from qcheck.classify import classify, unsafe_pickle_message
from qcheck.model import Checkpoint, Inspection, SourceFile
from support import builders as b


def _mismatches(insp: Inspection) -> list[str]:
    return [f.message.split(" (")[0] for f in insp.findings if f.kind == "config-mismatch"]


def _gptq_with(**config: object) -> Inspection:
    fx = b.gptq_fixture()
    fx.configs["config.json"]["quantization_config"].update(config)
    return classify(fx.checkpoint())


@pytest.mark.parametrize("bits, kept", [(0, False), (1, True), (64, True), (65, False), (-4, False)])
def test_config_bits_outside_1_to_64_are_dropped_not_reported(bits, kept):
    """A config's bits in 1..64 are checked against the packed shapes (here 4-bit: a finding when they differ);
    0, negative or over 64 is no number a real config has: dropped, no finding."""
    insp = _gptq_with(bits=bits)
    assert insp.quantization.weight_bits == 4
    assert _mismatches(insp) == ([f"config says {bits}-bit weights, but packed tensor shapes give 4-bit"]
                                 if kept else [])


@pytest.mark.parametrize("group, kept", [(0, False), (1, True), (-1, True), (-2, False), (64, True)])
def test_config_group_sizes_that_cannot_be_real_are_dropped(group, kept):
    insp = _gptq_with(group_size=group)
    assert insp.quantization.group_size == 128
    assert _mismatches(insp) == ([f"config says group_size {group}, but tensor shapes give 128"] if kept else [])


@pytest.mark.parametrize("block, kept", [([128, 128], False), ([64, 64], True), ([0, 128], False),
                                         ([128, 0], False), ([128], False), ([128, 128, 128], False),
                                         ([-64, 64], False), ([64, -64], False), ([1, 128], True), ([128, 1], True)])
def test_config_block_sizes_other_than_two_positive_edges_are_dropped(block, kept):
    """A block edge of 1 is the smallest real one (kept, and it disagrees with the scales); 0 or negative is not."""
    fx = b.fp8_block_deepseek()
    fx.configs["config.json"]["quantization_config"]["weight_block_size"] = block
    insp = classify(fx.checkpoint())
    assert insp.quantization.block_size == [128, 128]
    assert _mismatches(insp) == ([f"config says block size {block}, but scale shapes give [128, 128]"] if kept else [])


@pytest.mark.parametrize("block, kept", [([0, 128], False), ([128, 0], False), ([1, 128], True), ([1, 1], True),
                                         ([-1, 128], False)])
def test_a_block_edge_of_zero_from_any_reader_is_dropped(block, kept):
    """compressed-tensors reads an unreadable block_structure edge as 0 (fp8's reader refuses it itself): the one
    check of every config's block drops a 0 edge and keeps an edge of 1."""
    from qcheck.classify import _sane
    from qcheck.classify.base import Draft

    draft = Draft(tensors={}, metadata={}, qlinears=[], expected_block=list(block))
    _sane(draft)
    assert draft.expected_block == (block if kept else None)


@pytest.mark.parametrize("count, tail", [(7, ""), (8, ""), (9, ", ... (1 more)"), (12, ", ... (4 more)")])
def test_pickle_message_lists_eight_imports_then_counts_the_rest(count, tail):
    names = [f"mod{i}.f" for i in range(count)]
    shown = ", ".join(names[:8])
    assert unsafe_pickle_message(names) == (
        f"pickle checkpoint: not statically verifiable, never unpickled (imports: {shown}{tail}); "
        "convert it to safetensors")
    assert "imports: none found" in unsafe_pickle_message([])


@pytest.mark.parametrize("size, reported", [(0, None), (4_920_000_000, 4_920_000_000)])
def test_pickle_checkpoint_size(size, reported):
    ck = Checkpoint(path="model.bin", container="pickle", files=[SourceFile("model.bin", size, "pickle")],
                    pickle_globals=["collections.OrderedDict"])
    assert classify(ck).size_bytes == reported


def test_where_the_config_came_from_names_the_file():
    """A config mismatch names the file it was read from: hf_quant_config.json for ModelOpt's own file."""
    fx = b.nvfp4_modelopt_fixture()
    fx.configs["hf_quant_config.json"]["quantization"]["quant_algo"] = "FP8"
    del fx.configs["config.json"]["quantization_config"]
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "nvfp4"
    assert [f.where for f in insp.findings if f.kind == "config-mismatch"] == ["hf_quant_config.json"]


def test_an_unknown_quant_method_is_classified_from_its_tensors_and_says_so():
    fx = b.fp8_ct_channel()
    fx.configs["config.json"]["quantization_config"] = {"quant_method": "brand-new-fp8"}
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    assert "quant_method 'brand-new-fp8' classified as fp8 from its tensors" in insp.warnings
    assert "config.json quantization_config: unknown quant_method 'brand-new-fp8'; classified from the tensors" \
        in insp.warnings
    known = classify(b.fp8_ct_channel().checkpoint())  # a known method that agrees with its tensors: no such note
    assert known.quantization.method == "fp8" and not any("classified as" in w for w in known.warnings)


def test_mixed_precision_warning_gives_each_methods_share():
    """Half the layers FP8, half NVFP4 by elements (the same shapes): each share is printed."""
    shape = b.Shape(layers=2)

    def linear(p: str, o: int, i: int) -> b.Spec:
        return b.fp8_channel(p, o, i) if p.startswith("model.layers.0.") else b.nvfp4_modelopt(p, o, i)

    fx = b.Fixture(b.model_tensors(shape, linear), {"config.json": b.llama_config(shape)}, {"format": "pt"})
    insp = classify(fx.checkpoint())
    mixed = [w for w in insp.warnings if w.startswith("mixed precision")]
    assert mixed == [f"mixed precision: {insp.quantization.method} holds 50.0% of quantised weights by elements; "
                     f"also {'nvfp4' if insp.quantization.method == 'fp8' else 'fp8'} 50.0%"]
    one = classify(b.fp8_ct_channel().checkpoint())
    assert not any(w.startswith("mixed precision") for w in one.warnings)


def test_a_config_declaring_schemes_no_tensor_uses_says_which():
    fx = b.fp8_ct_channel()
    groups = fx.configs["config.json"]["quantization_config"]["config_groups"]
    groups["group_1"] = b.scheme(b.qargs(4, "float", "group", group_size=16), fmt="nvfp4-pack-quantized")
    groups["group_1"]["targets"] = ["re:.*never_matches.*"]
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    assert "config declares other schemes (nvfp4) that no tensor uses" in insp.warnings
    plain = classify(b.fp8_ct_channel().checkpoint())
    assert not any("config declares other schemes" in w for w in plain.warnings)


def test_without_a_config_the_layout_names_the_producer():
    """No config: the producer a layout proves (the majority method's layers only), MLX's safetensors metadata."""
    fx = copy.deepcopy(b.nvfp4_modelopt_fixture())
    fx.configs = {}
    insp = classify(fx.checkpoint())
    assert (insp.quantization.method, insp.quantization.producer) == ("nvfp4", "modelopt")
    assert "no quantization config found; classified from tensor names, dtypes and shapes" in insp.warnings
    # the minority method's producer is not the majority's: NVFP4 (ModelOpt) in one layer of three, FP8 in two
    shape = b.Shape(layers=3)

    def linear(p: str, o: int, i: int) -> b.Spec:
        return b.nvfp4_modelopt(p, o, i) if p.startswith("model.layers.0.") else b.fp8_channel(p, o, i)

    mixed = classify(b.Fixture(b.model_tensors(shape, linear), {"config.json": b.llama_config(shape)},
                               {"format": "pt"}).checkpoint())
    assert (mixed.quantization.method, mixed.quantization.producer) == ("fp8", None)
    # one large DeepSeek FP8 layer holds most elements; two small ModelOpt NVFP4 layers are more layers, not more
    # weight: the producer is the majority method's (deepseek), not the most common producer over all layers
    spec = {"big.weight": ("F8_E4M3", (1024, 1024)), "big.weight_scale_inv": ("F32", (8, 8))}
    for name in ("s1", "s2"):
        spec.update({f"{name}.weight": ("U8", (64, 32)), f"{name}.weight_scale": ("F8_E4M3", (64, 4)),
                     f"{name}.weight_scale_2": ("F32", ())})
    q = classify(b.Fixture(spec).checkpoint()).quantization
    assert (q.method, q.producer) == ("fp8", "deepseek")
    mlx = copy.deepcopy(b.mlx_fixture())
    mlx.configs = {}
    q = classify(mlx.checkpoint()).quantization
    assert (q.method, q.producer) == ("mlx", "mlx-lm")
    # transformers' metal layout (qbiases) is its own producer, unless MLX's own metadata says mlx wrote the file
    metal = copy.deepcopy(mlx)
    metal.tensors = {n.replace(".biases", ".qbiases"): t for n, t in mlx.tensors.items()}
    metal.metadata = {"format": "pt"}
    assert classify(metal.checkpoint()).quantization.producer == "transformers (metal)"
    metal.metadata = {"format": "mlx"}
    assert classify(metal.checkpoint()).quantization.producer == "mlx-lm"


def test_dtype_falls_back_to_the_config_when_no_weight_is_a_float():
    fx = b.gptq_fixture()
    fx.tensors = {n: t for n, t in fx.tensors.items() if t[0] != "BF16"}
    fx.configs["config.json"]["torch_dtype"] = "float16"
    assert classify(fx.checkpoint()).dtype == "float16"
    assert classify(b.gptq_fixture().checkpoint()).dtype == "bfloat16"


# ------------------------------------------------------------------------ what the layers' shapes give
def _quantization_of(qlinears, method="gptq", **draft_fields):
    """``classify``'s summary of scanned layers (``_quantization``), for layers a hostile or odd file produces."""
    from qcheck.classify import _quantization
    from qcheck.classify.base import Draft
    from qcheck.classify.configs import read_configs
    from qcheck.classify.table import TensorTable

    ck = Checkpoint(path="x", container="safetensors")
    draft = Draft(tensors=ck.tensors, metadata={}, qlinears=qlinears, **draft_fields)
    return _quantization(ck, TensorTable(ck.tensors), read_configs(ck), draft, method), draft


def _layer(**kw):
    from qcheck.classify.base import QLinear

    base = {"name": "m", "method": "gptq", "layout": "gptq", "tensors": [], "logical": None, "bits": 4,
            "group_size": 128, "granularity": "group"}
    base.update(kw)
    return QLinear(**base)


@pytest.mark.parametrize("bits, reported, counted", [(0, None, False), (0.5, None, True), (1, 1, True),
                                                     (64, 64, True), (65, None, False), (None, None, False)])
def test_layer_bits_outside_0_to_64_are_not_counted(bits, reported, counted):
    """Shapes of a hostile file can give 0- or 65-bit weights: such layers do not vote (no finding against the
    config either); over 0 up to 64 do (a fraction is no nominal bit count: reported as none)."""
    q, draft = _quantization_of([_layer(bits=bits), _layer(bits=bits)], expected_bits=4)
    assert q.weight_bits == reported
    assert [f.message.split(" (")[0] for f in draft.findings] == (
        [f"config says 4-bit weights, but packed tensor shapes give {bits}-bit"] if counted else [])


@pytest.mark.parametrize("group, reported", [(0, None), (1, 1), (-1, -1), (-2, None), (128, 128)])
def test_layer_groups_that_cannot_be_real_are_not_counted(group, reported):
    q, _ = _quantization_of([_layer(group_size=group, granularity="group")])
    assert q.group_size == reported


def test_one_scale_row_is_per_channel_only_when_no_layer_gives_a_group():
    one_row = _layer(group_size=None, whole_row=True)
    q, _ = _quantization_of([one_row, _layer(group_size=None)])
    assert (q.group_size, q.scale_granularity) == (-1, "per-channel")  # any one-row layer decides it
    q, _ = _quantization_of([one_row, _layer(group_size=64)])
    assert q.group_size == 64
    q, _ = _quantization_of([_layer(group_size=None), _layer(group_size=None)])
    assert q.group_size is None


@pytest.mark.parametrize("block, reported", [([128, 128], [128, 128]), ([0, 128], None), ([128, 0], None),
                                             ([1, 1], [1, 1]), ([128], None), ([128, 128, 128], None)])
def test_layer_blocks_other_than_two_positive_edges_are_not_counted(block, reported):
    q, _ = _quantization_of([_layer(method="fp8", layout="fp8-block", bits=8, group_size=None, block_size=block,
                                    granularity="block")], method="fp8")
    assert q.block_size == reported


def test_config_mismatch_without_a_config_file_name_says_config():
    _, draft = _quantization_of([_layer(bits=8)], expected_bits=4)
    assert [(f.where, f.message.split(" (")[0]) for f in draft.findings] == [
        ("config", "config says 4-bit weights, but packed tensor shapes give 8-bit")]
    _, draft = _quantization_of([_layer(bits=8)], expected_bits=4, config_where="quantize_config.json")
    assert draft.findings[0].where == "quantize_config.json"


def test_bits_of_formats_that_vary_per_layer_are_reported_only_when_every_layer_agrees():
    mixed = [_layer(method="exl2", layout="exl2", bits=4, group_size=None),
             _layer(method="exl2", layout="exl2", bits=4, group_size=None),
             _layer(method="exl2", layout="exl2", bits=6, group_size=None)]
    q, _ = _quantization_of(mixed, method="exl2")
    assert q.weight_bits is None
    same = [_layer(method="exl2", layout="exl2", bits=4, group_size=None) for _ in range(2)]
    assert _quantization_of(same, method="exl2")[0].weight_bits == 4
    gptq = [_layer(bits=4), _layer(bits=4), _layer(bits=8)]
    assert _quantization_of(gptq, method="gptq")[0].weight_bits == 4  # a fixed-width format: the layers' mode


def test_block_size_falls_back_to_the_config_only_for_block_scales():
    blocky = _layer(method="fp8", layout="fp8-block", bits=8, group_size=None, block_size=None, granularity="block")
    assert _quantization_of([blocky], method="fp8", expected_block=[128, 128])[0].block_size == [128, 128]
    channel = _layer(method="fp8", layout="fp8", bits=8, group_size=-1, granularity="per-channel")
    assert _quantization_of([channel], method="fp8", expected_block=[128, 128])[0].block_size is None


@pytest.mark.parametrize("points, reported", [([True, False], True), ([False, False], False), ([None], None),
                                              ([None, False], False)])
def test_zero_point_from_the_layers_when_the_config_says_nothing(points, reported):
    q, _ = _quantization_of([_layer(zero_point=z) for z in points])
    assert q.zero_point is reported
    assert _quantization_of([_layer(zero_point=True)], zero_point=False)[0].zero_point is False  # the config's


def test_activation_from_the_tensors_only_without_a_config():
    static = [_layer(method="fp8", layout="fp8", bits=8, group_size=-1, granularity="per-channel", input_scale=s)
              for s in (False, True)]
    q, _ = _quantization_of(static, method="fp8")
    assert (q.activation_dtype, q.activation_scheme) == ("float8_e4m3", "static per-tensor")  # any stored scale
    q, _ = _quantization_of(static, method="fp8", expected_method="fp8")
    assert (q.activation_dtype, q.activation_scheme) == (None, None)  # the config's reader decides, not the tensors
    q, _ = _quantization_of(static[:1], method="fp8")
    assert q.activation_dtype is None


def test_bits_per_weight_counts_every_tensor_of_every_sized_layer():
    """Stored bytes x 8 / logical elements, over layers whose size is known: a layer without a logical size or with a
    tensor of unknown size is left out, wherever it stands."""
    from qcheck.classify import _quantization
    from qcheck.classify.base import Draft
    from qcheck.classify.configs import read_configs
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    tensors = {"a.q": TensorInfo("a.q", "I32", (16, 64), 4096), "a.s": TensorInfo("a.s", "F16", (1, 64), 128),
               "a.z": TensorInfo("a.z", "I32", (0, 8), 0),
               "b.q": TensorInfo("b.q", "I32", (16, 64), 4096), "b.s": TensorInfo("b.s", "X9", (1, 64), None),
               "c.q": TensorInfo("c.q", "I32", (16, 64), 4096)}
    layers = [_layer(name="c", tensors=["c.q"], logical=None), _layer(name="b", tensors=["b.q", "b.s"], logical=8192),
              _layer(name="a", tensors=["a.q", "a.s", "a.z"], logical=8192)]
    ck = Checkpoint(path="x", container="safetensors", tensors=tensors)
    draft = Draft(tensors=tensors, metadata={}, qlinears=layers)
    q = _quantization(ck, TensorTable(tensors), read_configs(ck), draft, "gptq")
    assert q.bits_per_weight == (4096 + 128) * 8 / 8192  # only layer a: 4.125


# ------------------------------------------------------------------------------- model numbers, hints
def _from_config(**cfg: object) -> Inspection:
    from qcheck.classify.arch import fill_from_config

    insp = Inspection(path="x", container="safetensors")
    fill_from_config(insp, dict(cfg))
    return insp


def test_head_dim_from_the_config_or_hidden_over_heads():
    assert _from_config(hidden_size=2048, num_attention_heads=16, head_dim=256).head_dim == 256  # given: kept
    derived = _from_config(hidden_size=4096, num_attention_heads=32).head_dim
    assert derived == 128 and type(derived) is int
    assert _from_config(hidden_size=100, num_attention_heads=3).head_dim == 33  # floor, as transformers does
    assert _from_config(hidden_size=256, num_attention_heads=1).head_dim == 256
    assert _from_config(hidden_size=256, num_attention_heads=-4).head_dim is None
    assert _from_config(hidden_size=256, num_attention_heads=0).head_dim is None


@pytest.mark.parametrize("experts, moe", [(None, False), (1, False), (2, True), (128, True)])
def test_two_experts_make_a_mixture(experts, moe):
    insp = _from_config(num_local_experts=experts, num_experts_per_tok=2)
    assert (insp.moe, insp.num_experts, insp.num_experts_used) == (
        (True, experts, 2) if moe else (False, None, None))


def _experts_from(names: dict[str, tuple[int, ...]]) -> tuple[bool, int | None]:
    from qcheck.classify.arch import fill_from_tensors
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    tensors = {n: TensorInfo(n, "BF16", s, 2) for n, s in names.items()}
    out = []
    for table in (None, TensorTable(tensors)):
        insp = Inspection(path="x", container="safetensors")
        fill_from_tensors(insp, tensors, table)
        out.append((insp.moe, insp.num_experts))
    assert out[0] == out[1]
    return out[0]


def test_experts_from_tensor_names_fused_stacks_and_hostile_newlines():
    assert _experts_from({f"model.layers.0.mlp.experts.{i}.w1.weight": (4, 4) for i in range(3)}) == (True, 3)
    assert _experts_from({"blk.0.ffn_up_exps.weight": (8, 16, 4), "blk.0.attn_q.weight": (4, 4)}) == (True, 8)
    assert _experts_from({"model.layers.0.mlp.experts.gate_up_proj": (32, 8, 4)}) == (True, 32)
    assert _experts_from({"model.layers.0.mlp.down_proj.weight": (4, 4)}) == (False, None)
    # a name may hold newlines (safetensors keys are any JSON string): one name, one expert index, the first
    one = {"a.experts.1.x\nb.experts.7.y": (4, 4), "a.experts.2.x": (4, 4)}
    assert _experts_from(one) == (True, 2)
    two = {"a.experts.1.x\nb.experts.7.y\nc.experts.9.z": (4, 4), "a.experts.2.x": (4, 4), "n": (4,)}
    assert _experts_from(two) == (True, 2)


def test_moe_from_the_config_is_not_recounted_from_the_tensors():
    from qcheck.classify.arch import fill_from_tensors
    from qcheck.model import TensorInfo

    insp = _from_config(num_local_experts=8)
    tensors = {f"m.experts.{i}.w": TensorInfo(f"m.experts.{i}.w", "BF16", (4, 4), 2) for i in range(3)}
    fill_from_tensors(insp, tensors)
    assert (insp.moe, insp.num_experts) == (True, 8)


@pytest.mark.parametrize("bits, kept", [(0, None), (1, 1), (32, 32), (33, None), (-4, None)])
@pytest.mark.parametrize("group, group_kept", [(0, None), (1, 1), (-1, -1), (-2, None), (128, 128)])
def test_hints_keep_only_bits_and_groups_a_real_config_has(bits, kept, group, group_kept):
    from qcheck.classify.base import Hints

    assert Hints(bits=bits, group_size=group).for_module("m") == (kept, group_kept)


def test_per_module_hints_override_only_what_they_give():
    from qcheck.classify.base import Hints

    hints = Hints(bits=4, group_size=128, overrides={"a": (8, None), "b": (None, 32), "c": (None, None)})
    assert [hints.for_module(m) for m in ("a", "b", "c", "d")] == [(8, 128), (4, 32), (4, 128), (4, 128)]


def test_plain_dtype_counts_dotted_weights_leaves_side_tensors_out_and_memoises_only_the_unclaimed_answer():
    from qcheck.classify import _plain_dtype
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    def table(**spec: tuple[str, tuple[int, ...]]) -> TensorTable:
        return TensorTable({n: TensorInfo(n, d, shape, None) for n, (d, shape) in spec.items()})

    two = table(**{"a.weight": ("BF16", (64, 64)), "b.weight": ("F16", (32, 32))})
    # the answer without claims is kept for the next unclaimed call; a call with claims neither reads nor writes it
    assert [_plain_dtype(two, set()), _plain_dtype(two, {"a.weight"}), _plain_dtype(two, set())] == [
        "bfloat16", "float16", "bfloat16"]
    # a tensor named just "weight" is no "*.weight" (it would outweigh the model's BF16 weights)
    assert _plain_dtype(table(**{"weight": ("F32", (128, 128)), "a.weight": ("BF16", (8, 8))}), set()) == "bfloat16"
    # only quantisation side tensors: no plain dtype
    assert _plain_dtype(table(**{"a.weight_scale": ("F32", (4, 4)), "a.input_scale": ("F32", ())}), set()) is None


def test_majority_counts_a_layer_of_unknown_size_as_one_element():
    """Two layers whose size the shapes cannot tell do not outweigh one layer of three elements."""
    from qcheck.classify import _majority
    from qcheck.classify.base import QLinear

    layers = [QLinear("a0", "int4", "x", [], None), QLinear("a1", "int4", "x", [], None),
              QLinear("b0", "fp8", "y", [], 3)]
    assert _majority(layers) == ("fp8", {"fp8": 3, "int4": 2})
    assert _majority([]) == (None, {})


def _view_hints(quant: dict, side: dict | None = None, family: str | None = None):
    from qcheck.classify import _hints
    from qcheck.classify.configs import ConfigView

    hints = _hints(ConfigView(quant=quant, side={"quantize_config.json": side} if side else {}), family)
    return hints.bits, hints.group_size, hints.overrides


def test_hints_come_from_the_first_compressed_tensors_group_with_weights():
    """Without top-level bits/group_size, the first config group with weight args gives them (even without a group
    size of its own); top-level values win over the groups."""
    groups = {"no_weights": {"weights": None}, "g0": {"weights": {"num_bits": 4, "group_size": 128}},
              "g1": {"weights": {"num_bits": 8, "group_size": 32}}}
    assert _view_hints({"config_groups": groups}, family="compressed-tensors") == (4, 128, {})
    first_without_group = {"g0": {"weights": {"num_bits": 4}}, "g1": {"weights": {"num_bits": 8, "group_size": 32}}}
    assert _view_hints({"config_groups": first_without_group}) == (4, None, {})
    assert _view_hints({"bits": 8, "group_size": 64, "config_groups": groups}) == (8, 64, {})


@pytest.mark.parametrize("dtype, bits", [("int4", 4), ("uint4", 4), ("int8", 8), ("INT4", 4), ("fp8_e4m3", None)])
def test_hints_from_quarks_global_weight_dtype(dtype, bits):
    quant = {"global_quant_config": {"weight": {"dtype": dtype, "group_size": 32}}}
    assert _view_hints(quant, family="quark") == (bits, 32, {})
    assert _view_hints({**quant, "bits": 2, "group_size": 64}, family="quark") == (2, 64, {})


def test_hints_take_gptqmodel_dynamic_overrides_from_the_config_or_the_side_file():
    """'+:' rules and exact names override a module's bits/group; '-:' rules (skip a module) and non-dict values are
    no override; the quantization_config's dynamic wins over quantize_config.json's."""
    dynamic = {"+:model.layers.0.mlp": {"bits": 8}, "model.layers.1.self_attn": {"group_size": 32},
               "-:model.layers.2": {"bits": 16}, "model.layers.3": 8}
    expected = {"model.layers.0.mlp": (8, None), "model.layers.1.self_attn": (None, 32)}
    assert _view_hints({"bits": 4, "dynamic": dynamic}, family="gptq") == (4, None, expected)
    assert _view_hints({"bits": 4}, side={"dynamic": dynamic}, family="gptq") == (4, None, expected)
    assert _view_hints({"bits": 4, "dynamic": {"a": {"bits": 3}}}, side={"dynamic": dynamic})[2] == {"a": (3, None)}


# ----------------------------------------------------------------------------- shape arithmetic (base.py)
@pytest.mark.parametrize("in_dim, rows, hint, expected", [
    (128, 1, 128, (128, False)), (128, 1, 256, (256, False)), (128, 1, 64, (None, True)), (128, 1, -1, (-1, False)),
    (128, 1, -2, (None, True)), (128, 1, 0, (None, True)), (128, 1, None, (None, True)), (None, 1, 128, (None, True)),
    (1, 1, 1, (1, False)), (0, 1, 0, (None, True)),
    (256, 2, 128, (128, False)), (256, 2, None, (128, False)), (250, 3, None, (None, False)),
    (None, 2, 128, (None, False))])
def test_row_group(in_dim, rows, hint, expected):
    from qcheck.classify.base import row_group

    assert row_group(in_dim, rows, hint) == expected


@pytest.mark.parametrize("a, b, expected", [(8, 2, 4), (4, 1, 4), (0, 3, 0), (7, 2, None), (4, 0, None),
                                            (4, -2, None), (-4, -2, None)])
def test_exact_div(a, b, expected):
    from qcheck.classify.base import exact_div

    assert exact_div(a, b) == expected


@pytest.mark.parametrize("dim, count, block", [
    (256, 2, 128), (100, 1, 128), (256, 4, 64), (2048, 8, 256), (96, 3, 32), (48, 3, 16), (2048, 4, 512),
    (4096, 4, 1024), (100, 7, 16), (100, 9, 12), (10, 4, 3), (10, 6, None), (7168, 56, 128), (0, 1, None), (4, 0, None),
    (1, 1, 128),
    (-4, 1, None), (4, -1, None)])
def test_block_edge_from_a_dimension_and_a_block_count(dim, count, block):
    """128 is preferred, then 64, 256, 32, 16, 512, 1024 (what producers use); else the ceil quotient if it fits."""
    from qcheck.classify.base import block_from

    assert block_from(dim, count) == block


# ----------------------------------------------------------------------------------- bitsandbytes scans
def _bnb_scan(spec: dict[str, tuple[str, tuple[int, ...]]], claimed: set[str] = frozenset(), nbytes=None):
    from qcheck.classify import bnb
    from qcheck.classify.base import Hints
    from qcheck.model import TensorInfo

    tensors = {n: TensorInfo(n, d, s, (nbytes or {}).get(n, b.nbytes(d, s) if d in b.BITS else None))
               for n, (d, s) in spec.items()}
    return {q.name: q for q in bnb.scan(tensors, set(claimed), Hints())}


QS = ".weight.quant_state.bitsandbytes__"


def test_bnb_4bit_layers_their_tensors_and_double_quantisation():
    spec = {"a.weight": ("U8", (2048, 1)), f"a{QS}nf4": ("U8", (100,)), "a.weight.absmax": ("F32", (64,)),
            "a.weight.quant_map": ("F32", (16,)),
            "b.weight": ("U8", (2048, 1)), f"b{QS}fp4": ("U8", (100,)), "b.weight.absmax": ("U8", (64,)),
            "b.weight.nested_absmax": ("F32", (1,)), "b.weight.nested_quant_map": ("F32", (256,)),
            f"lost{QS}nf4": ("U8", (100,))}  # a quant_state without its weight: skipped, the scan goes on
    out = _bnb_scan(dict(sorted(spec.items(), key=lambda kv: not kv[0].startswith("lost"))))
    assert set(out) == {"a", "b"}
    a, bq = out["a"], out["b"]
    assert (a.logical, a.group_size, a.weight_dtype, a.scale_dtype, a.zero_point, a.bits) == (
        4096, 64, "nf4", "float32", False, 4)
    assert a.tensors == ["a.weight", f"a{QS}nf4", "a.weight.absmax", "a.weight.quant_map"]
    assert (bq.weight_dtype, bq.scale_dtype) == ("fp4_e2m1", "uint8")  # absmax stored as 8-bit codes
    assert bq.tensors[-2:] == ["b.weight.nested_absmax", "b.weight.nested_quant_map"]
    # a marker twice in one (hostile) name: split once, never a crash
    odd = _bnb_scan({"c.weight": ("U8", (8, 1)), f"c{QS}nf4{QS}nf4": ("U8", (4,))})
    assert list(odd) == ["c"] and odd["c"].layout == f"bnb-nf4{QS}nf4"
    # a weight of unknown size: no logical count from it
    unknown = _bnb_scan({"d.weight": ("X4", (8, 1)), f"d{QS}nf4": ("U8", (4,))})
    assert unknown["d"].logical == 0


def test_bnb_int8_layers_need_their_row_scales():
    spec = {"c.weight": ("I8", (16, 8)), "c.SCB": ("F32", (16,)),
            "embed.weight": ("I8", (16, 8)), "a.weight": ("I8", (16, 8)), "a.SCB": ("F32", (16,)),
            "a.weight_format": ("U8", ()), "f.weight": ("BF16", (16, 8)), "f.SCB": ("F32", (16,))}
    out = _bnb_scan(spec, claimed={"c.weight"})
    assert set(out) == {"a"}  # claimed (first: the scan goes on), no SCB, not int8: not an LLM.int8 layer
    a = out["a"]
    assert (a.logical, a.bits, a.group_size, a.granularity, a.weight_dtype, a.scale_dtype, a.zero_point) == (
        128, 8, -1, "per-channel", "int8", "float32", False)
    assert a.tensors == ["a.weight", "a.SCB", "a.weight_format"]


# ----------------------------------------------------------------------------------------- config places
def _view(**configs: object):
    from qcheck.classify.configs import read_configs

    return read_configs(Checkpoint(path="x", container="safetensors", configs=dict(configs)))


def test_the_language_model_numbers_come_from_the_first_nested_config_that_has_them():
    llm = {"hidden_size": 64, "num_hidden_layers": 2}
    v = _view(**{"config.json": {"architectures": ["VLM"], "text_config": "junk", "llm_config": llm,
                                 "language_config": {"hidden_size": 99}}})
    assert v.model == {**llm, "architectures": ["VLM"]}
    layers_only = {"num_hidden_layers": 3}
    assert _view(**{"config.json": {"text_config": layers_only}}).model == {**layers_only, "architectures": None}
    neither = {"vocab_size": 5}
    assert _view(**{"config.json": {"text_config": neither}}).model == {"text_config": neither}
    top = {"hidden_size": 32, "text_config": llm}
    assert _view(**{"config.json": top}).model is not llm and _view(**{"config.json": top}).model["hidden_size"] == 32
    own = _view(**{"config.json": {"text_config": {**llm, "architectures": ["Inner"]}}})
    assert own.model["architectures"] == ["Inner"]


def test_where_the_quantization_config_was_found():
    q = {"quant_method": "fp8"}
    assert _view(**{"config.json": {"quantization_config": q}}).quant_where == "config.json quantization_config"
    nested = _view(**{"config.json": {"text_config": {"quantization_config": q}}})
    assert (nested.quant_where, nested.quant_method) == ("config.json text_config: quantization_config", "fp8")
    first = _view(**{"config.json": {"quantization_config": {"quant_method": "awq"},
                                     "text_config": {"quantization_config": q}}})
    assert first.quant_method == "awq"
    cc = _view(**{"config.json": {"compression_config": {"config_groups": {}}}})
    assert (cc.quant_where, cc.quant_method) == ("config.json compression_config", "compressed-tensors")
    cc = _view(**{"config.json": {"compression_config": {"quant_method": "other", "config_groups": {}}}})
    assert cc.quant_method == "other"
    wrapped = _view(**{"config.json": {"quantization_config": {"quantization_config": {"config_groups": {"g": {}}},
                                                               "sparsity_config": None}}})
    assert (wrapped.quant_method, "config_groups" in wrapped.quant) == ("compressed-tensors", True)
    assert _view(**{"config.json": {"quantization_config": {"quant_method": 5}}}).quant_method == ""


@pytest.mark.parametrize("block, mlx", [({"bits": 4}, True), ({"group_size": 64}, True), ({"mode": "mxfp4"}, True),
                                        ({"other": 1}, False), ("4bit", False)])
def test_an_mlx_block_has_bits_a_group_or_a_mode(block, mlx):
    v = _view(**{"config.json": {"quantization": block}})
    assert (v.mlx is not None, v.mlx_where) == (mlx, "config.json quantization" if mlx else None)
    inner = _view(**{"config.json": {"quantization": {"bits": 4}, "text_config": {"quantization": {"bits": 8}}}})
    assert (inner.mlx, inner.mlx_where) == ({"bits": 4}, "config.json quantization")
    nested = _view(**{"config.json": {"text_config": {"quantization": {"bits": 8}}}})
    assert nested.mlx_where == "config.json: text_config quantization"


def test_an_mlx_block_in_quantization_config_without_a_method():
    """mlx-lm also writes its block to quantization_config: with bits and group_size and no quant_method (and not
    compressed-tensors' config_groups) it is MLX's."""
    block = {"bits": 4, "group_size": 64}
    v = _view(**{"config.json": {"quantization_config": block}})
    assert (v.mlx, v.mlx_where) == (block, "config.json quantization_config")
    for other in ({"bits": 4}, {"group_size": 64}, {**block, "config_groups": {}}, {**block, "quant_method": "awq"}):
        assert _view(**{"config.json": {"quantization_config": other}}).mlx is None, other
    own = _view(**{"config.json": {"quantization": {"bits": 8, "group_size": 32}, "quantization_config": block}})
    assert own.mlx == {"bits": 8, "group_size": 32}


# --------------------------------------------------------------------------------------------- dtype words
@pytest.mark.parametrize("value, word", [("torch.bfloat16", "bfloat16"), (" E4M3 ", "float8_e4m3"),
                                         ("i16", "int16"), ("c64", "complex64"), ("F8_E5M2FNUZ", "float8_e5m2fnuz"),
                                         ("  ", None), ("", None), (5, None), (None, None), ("float12", None)])
def test_config_dtype_words(value, word):
    from qcheck.classify.dtypes import config_word

    assert config_word(value) == word


@pytest.mark.parametrize("bits, signed, word", [(1, True, "int1"), (4, True, "int4"), (8, False, "uint8"),
                                                (4.0, True, "int4"), (0, True, None), (9, True, None),
                                                (4.5, True, None), (None, True, None), (-4, True, None)])
def test_integer_weight_words(bits, signed, word):
    from qcheck.classify.dtypes import int_word

    assert int_word(bits, signed) == word


def test_tensor_bytes_from_the_dtype_when_the_reader_gave_none():
    from qcheck.classify.dtypes import tensor_nbytes
    from qcheck.model import TensorInfo

    assert tensor_nbytes(TensorInfo("x", "BF16", (4, 4))) == 32
    assert tensor_nbytes(TensorInfo("x", "F4", (3, 3))) == 4  # 36 bits: 4 whole bytes (floor)
    assert tensor_nbytes(TensorInfo("x", "f6_e2m3", (4,))) == 3
    assert tensor_nbytes(TensorInfo("x", "X9", (4,))) is None
    assert tensor_nbytes(TensorInfo("x", "BF16", (4, 4), nbytes=7)) == 7  # the reader's figure wins


# ------------------------------------------------------------------------------------ scanner arbitration
def test_a_tensor_belongs_to_one_quantised_weight_the_most_specific_scanner_wins():
    """A bitsandbytes layer claims its U8 weight first; a later scanner's proposal that shares any tensor with it
    (here ModelOpt NVFP4's U8 weight + FP8 scales) is dropped, and the layers after it are still scanned."""
    from qcheck.classify.fingerprints import scan_all

    qs = ".weight.quant_state.bitsandbytes__nf4"
    spec = {"a.weight": ("U8", (64, 32)), f"a{qs}": ("U8", (100,)), "a.weight.absmax": ("F32", (32,)),
            "a.weight_scale": ("F8_E4M3", (64, 4)), "a.weight_scale_2": ("F32", ()),
            "b.weight": ("U8", (64, 32)), "b.weight_scale": ("F8_E4M3", (64, 4)), "b.weight_scale_2": ("F32", ())}
    fx = b.Fixture(spec)
    ck = fx.checkpoint()
    for table in (None, "given"):
        from qcheck.classify.base import Hints
        from qcheck.classify.table import TensorTable

        found = scan_all(ck.tensors, {}, Hints(), TensorTable(ck.tensors) if table else None)
        assert [(q.name, q.method) for q in found] == [("a", "bitsandbytes"), ("b", "nvfp4")]


@pytest.mark.parametrize("configs, family", [
    ({"hf_quant_config.json": {"quantization": {}}, "config.json": {"quantization_config": {"quant_method": "awq"}}},
     "modelopt"),
    ({"config.json": {"quantization_config": {"quant_method": "GPTQ"}}}, "gptq"),
    ({"config.json": {"quantization_config": {"quant_method": "made-up"}}}, "unknown-method"),
    ({"config.json": {"quantization": {"bits": 4}}}, "mlx"),
    ({"config.json": {"quantization_config": {"config_groups": {}}}}, "compressed-tensors"),
    ({"config.json": {"quantization_config": {"bits": 4}}}, None),
    ({"quantization_config.json": {"bits": 4.0}}, "exl3"),
    ({"quantization_config.json": {"quant_method": "EXL3"}}, "exl3"),
    ({"quantization_config.json": {"quant_method": "exl2"}}, None),
    ({"quantize_config.json": {"w_bit": 4}}, "awq"),
    ({"quantize_config.json": {"zero_point": True}}, "awq"),
    ({"quantize_config.json": {"version": "GEMV"}}, "awq"),
    ({"quantize_config.json": {"version": "gemm", "bits": 4}}, "awq"),
    ({"quantize_config.json": {"bits": 4, "version": None}}, "gptq"),
    ({"quantize_config.json": {"group_size": 128}}, None),
    ({}, None),
])
def test_which_family_reads_the_config(configs, family):
    from qcheck.classify.fingerprints import config_family

    assert config_family(_view(**configs)) == family


# -------------------------------------------------------------------------------------------------- exllama
def test_exl2_and_exl3_layers_from_their_shapes():
    from qcheck.classify import exllama
    from qcheck.classify.base import Hints

    spec = {"a.q_weight": ("I32", (40, 64)), "a.q_invperm": ("I16", (256,)), "a.q_scale": ("I32", (8, 8)),
            "a.q_groups": ("I16", (4,)),
            "n.q_weight": ("I32", (40, 64)), "n.q_invperm": ("I16", (0,)),  # no permutation length: skipped
            "p.q_weight": ("I32", (40, 64)), "p.q_perm": ("I16", (160,)),
            "v.q_weight": ("I32", (40,)), "v.q_invperm": ("I16", (256,)),  # not a matrix
            "t.trellis": ("I16", (4, 8, 48)), "t.suh": ("F16", (64,)),
            "u.trellis": ("I16", (4, 8, 40)), "w.trellis": ("I16", (4, 48))}  # not 16-aligned, not 3-D
    ck = b.Fixture(spec).checkpoint()
    out = {q.name: q for q in exllama.scan(ck.tensors, set(), Hints())}
    assert set(out) == {"a", "p", "t"}
    assert (out["a"].bits, out["a"].logical, out["a"].tensors) == (5.0, 256 * 64, ["a.q_weight", "a.q_invperm",
                                                                                     "a.q_scale", "a.q_groups"])
    assert out["p"].bits == 8.0
    assert (out["t"].bits, out["t"].logical, out["t"].tensors) == (3, 4 * 8 * 256, ["t.trellis", "t.suh"])
    assert type(out["t"].bits) is int  # an integer in the JSON (3, not 3.0)
    assert {q.name for q in exllama.scan(ck.tensors, {"a.q_weight", "t.trellis"}, Hints())} == {"p"}  # claimed
    one = b.Fixture({"a.q_weight": ("I32", (1, 64)), "a.q_invperm": ("I16", (1,))}).checkpoint()
    (q,) = exllama.scan(one.tensors, set(), Hints())  # a permutation of one input
    assert (q.bits, q.logical) == (32.0, 64)
    odd = b.Fixture({"a.q_weight": ("I32", (41, 64)), "a.q_invperm": ("I16", (96,))}).checkpoint()
    (q,) = exllama.scan(odd.tensors, set(), Hints())
    assert q.bits == round(32 * 41 / 96, 4) == 13.6667


def test_exllama_config_method_and_format():
    from qcheck.classify import exllama
    from qcheck.classify.base import Draft

    draft = Draft(tensors={}, metadata={}, qlinears=[])
    exllama.apply_config(_view(**{"quantization_config.json": {"bits": 4.0, "head_bits": 6, "version": "0.0.4"}}),
                         draft, "exl3", "exl3")
    assert (draft.config_method, draft.producer, draft.format) == (
        "exl3", "exllamav3", "target 4.0 bpw, head 6 bits, version 0.0.4")
    draft = Draft(tensors={}, metadata={}, qlinears=[])
    exllama.apply_config(_view(**{"config.json": {"quantization_config": {"quant_method": "exl2"}}}), draft, "exl2",
                         "exl2")
    assert (draft.config_method, draft.producer, draft.format) == ("exl2", "exllamav2", "exl2")


# --------------------------------------------------------------------------------------------------- FP8
def _fp8(weight: tuple[int, ...], scale: tuple[int, ...] | None, *, scale_dtype: str = "F32",
         scale_name: str = "weight_scale", extra: dict | None = None):
    from qcheck.classify import fp8
    from qcheck.classify.base import Hints

    spec = {"skip.weight": ("F8_E4M3", (16,)), "m.weight": ("F8_E4M3", weight), **(extra or {})}
    if scale is not None:
        spec[f"m.{scale_name}"] = (scale_dtype, scale)
    ck = b.Fixture(spec).checkpoint()
    out = {q.name: q for q in fp8.scan(ck.tensors, set(), Hints())}
    assert "skip" not in out  # a 1-D FP8 tensor is no weight
    return out["m"]


@pytest.mark.parametrize("weight, scale, kw, expected", [
    ((256, 512), (), {}, ("fp8", "per-tensor", None, None, "fp8")),
    ((256, 512), (1,), {}, ("fp8", "per-tensor", None, None, "fp8")),
    ((128, 128), (1, 1), {"scale_name": "weight_scale_inv"}, ("fp8", "block", None, [128, 128], "fp8-block")),
    ((8, 256, 512), (8,), {}, ("fp8", "per-tensor", None, None, "fp8")),
    ((8, 256, 512), (8, 1, 1), {}, ("fp8", "per-tensor", None, None, "fp8")),
    ((256, 512), (256,), {}, ("fp8", "per-channel", -1, None, "fp8")),
    ((256, 512), (256, 1), {}, ("fp8", "per-channel", -1, None, "fp8")),
    ((256, 512), (2, 1, 4, 1), {}, ("fp8", "block", None, [128, 128], "fp8-block-modelopt")),
    ((256, 512), (2, 2, 4, 1), {}, ("fp8", "block", None, [64, 512], "fp8-block")),
    ((256, 512), (256, 4), {}, ("fp8", "group", 128, None, "fp8")),
    ((256, 512), (256, 16), {"scale_dtype": "U8"}, ("mxfp8", "group", 32, None, "mxfp8")),
    ((256, 512), (256, 16), {"scale_dtype": "F8_E8M0"}, ("mxfp8", "group", 32, None, "mxfp8")),
    ((256, 512), (256, 1), {"scale_dtype": "U8"}, ("fp8", "per-channel", -1, None, "fp8")),
    ((256, 512), (2, 4), {"scale_name": "weight_scale_inv"}, ("fp8", "block", None, [128, 128], "fp8-block")),
    ((200, 300), (2, 3), {"scale_name": "weight_scale_inv"}, ("fp8", "block", None, [128, 128], "fp8-block")),
    ((256, 512), (3, 7), {}, ("fp8", "block", None, [86, 74], "fp8-block")),
    ((256, 512), (300, 600), {}, ("fp8", "block", None, [0, 0], "fp8-block")),
    ((256, 512), None, {}, ("fp8", None, None, None, "fp8")),
    # at the edges: one scalar in a 2-D weight_scale (per-tensor; only DeepSeek's weight_scale_inv [1, 1] is a
    # block) and a 1-D weight_scale_inv of one; two groups or MX groups; ModelOpt blocks that fit no edge; one scale
    # per output row shared by an expert stack (a block one row high)
    ((128, 128), (1, 1), {}, ("fp8", "per-tensor", None, None, "fp8")),
    ((256, 512), (1,), {"scale_name": "weight_scale_inv"}, ("fp8", "per-tensor", None, None, "fp8")),
    ((256, 256), (256, 2), {}, ("fp8", "group", 128, None, "fp8")),
    ((256, 64), (256, 2), {"scale_dtype": "U8"}, ("mxfp8", "group", 32, None, "mxfp8")),
    ((10, 10), (7, 1, 7, 1), {}, ("fp8", "block", None, [0, 0], "fp8-block-modelopt")),
    ((2, 64, 128), (64, 1), {}, ("fp8", "block", None, [1, 128], "fp8-block")),
])
def test_fp8_scale_layouts(weight, scale, kw, expected):
    q = _fp8(weight, scale, **kw)
    assert (q.method, q.granularity, q.group_size, q.block_size, q.layout) == expected
    assert q.producer == ("deepseek" if kw.get("scale_name") == "weight_scale_inv" else None)
    assert q.logical == b.nbytes("F8_E4M3", weight) and q.bits == 8


def test_fp8_weights_without_scales_are_each_found():
    from qcheck.classify import fp8
    from qcheck.classify.base import Hints

    ck = b.Fixture({"a.weight": ("F8_E4M3", (64, 64)), "b.weight": ("F8_E4M3", (64, 64)),
                    "c.weight": ("F8_E4M3", (64, 64)), "c.weight_scale": ("F32", ())}).checkpoint()
    found = {q.name: q.granularity for q in fp8.scan(ck.tensors, set(), Hints())}
    assert found == {"a": None, "b": None, "c": "per-tensor"}


def test_fp8_input_scale_and_scale_dtype():
    q = _fp8((256, 512), (), extra={"m.input_scale": ("F32", ())})
    assert (q.input_scale, q.tensors, q.scale_dtype, q.weight_dtype) == (
        True, ["m.weight", "m.input_scale", "m.weight_scale"], "float32", "float8_e4m3")
    assert _fp8((256, 512), ()).input_scale is False
    assert _fp8((256, 512), (256, 16), scale_dtype="U8").scale_dtype == "e8m0"


def _fp8_config(quant: dict, tensors: tuple[str, ...] = ()):
    from qcheck.classify import fp8
    from qcheck.classify.base import Draft

    draft = Draft(tensors=dict.fromkeys(tensors), metadata={}, qlinears=[])
    view = _view(**{"config.json": {"quantization_config": quant}})
    fp8.apply_config(view, draft, "fp8", "fp8")
    return draft


def test_fp8_configs():
    fb = _fp8_config({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})
    assert (fb.producer, fb.activation_dtype, fb.activation_scheme, fb.scale_granularity, fb.expected_group) == (
        "fbgemm", "float8_e4m3", "dynamic per-token", "per-channel", -1)
    ds = _fp8_config({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                      "weight_block_size": [128, 64]}, tensors=("m.weight", "m.weight_scale_inv"))
    assert (ds.weight_dtype, ds.expected_block, ds.activation_scheme, ds.producer) == (
        "float8_e4m3", [128, 64], "dynamic per-token-group 64", "deepseek")
    assert _fp8_config({"quant_method": "fp8", "fmt": "E5M2"}).weight_dtype == "float8_e5m2"
    assert _fp8_config({"quant_method": "fp8", "fmt": "e3m4"}).weight_dtype is None
    for block in ([128, 0], [128], [128, "x"], "128"):
        assert _fp8_config({"quant_method": "fp8", "weight_block_size": block}).expected_block is None, block
    static = _fp8_config({"quant_method": "fp8", "activation_scheme": "STATIC"})
    assert (static.activation_dtype, static.activation_scheme, static.producer) == (
        "float8_e4m3", "static per-tensor", None)
    dynamic = _fp8_config({"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert dynamic.activation_scheme == "dynamic per-token"
    none = _fp8_config({"quant_method": "fp8", "activation_scheme": "weight-only"})
    assert (none.activation_dtype, none.activation_scheme) == (None, None)


# ---------------------------------------------------------------------------------------------------- GGUF
def _gguf(md: dict, tensors: dict[str, tuple[str, tuple[int, ...], int | None]] | None = None) -> Inspection:
    from qcheck.model import TensorInfo

    infos = {n: TensorInfo(n, d, s, nb) for n, (d, s, nb) in (tensors or {}).items()}
    return classify(Checkpoint(path="m.gguf", container="gguf", metadata={"general.architecture": "llama", **md},
                               tensors=infos))


@pytest.mark.parametrize("count, moe", [(None, False), (1, False), (2, True), (64, True)])
def test_gguf_two_experts_make_a_mixture(count, moe):
    md = {"llama.expert_count": count, "llama.expert_used_count": 2} if count is not None else {}
    insp = _gguf(md)
    assert (insp.moe, insp.num_experts) == ((True, count) if moe else (False, None))


@pytest.mark.parametrize("hidden, heads, head_dim", [(4096, 32, 128), (100, 3, 33), (256, 1, 256), (0, 4, None),
                                                     (256, 0, None), (None, 4, None), (256, None, None)])
def test_gguf_head_dim_from_width_over_heads(hidden, heads, head_dim):
    md = {k: v for k, v in (("llama.embedding_length", hidden), ("llama.attention.head_count", heads)) if v is not None}
    got = _gguf(md).head_dim
    assert got == head_dim and (got is None or type(got) is int)
    assert _gguf({**md, "llama.attention.key_length": 96}).head_dim == 96


@pytest.mark.parametrize("count, shown", [(None, 1), (0, 1), (1, 1), (3, 3)])
def test_gguf_split_count(count, shown):
    assert _gguf({} if count is None else {"split.count": count}).gguf_split_count == shown


def test_gguf_weights_dtype_warnings_and_bits_per_weight():
    tensors = {"blk.0.attn_q.weight": ("Q4_0", (64, 64), 64 * 64 // 32 * 18),
               "blk.0.attn_norm.weight": ("F32", (64,), 256), "token_embd.weight": ("F16", (100, 64), 12800),
               "blk.0.empty.weight": ("Q4_0", (0, 64), 0), "blk.0.old.weight": ("Q4_0_4_4", (64, 64), None)}
    insp = _gguf({"general.file_type": 2}, tensors)
    q = insp.quantization
    assert (q.gguf_file_type, q.weight_bits, q.group_size, q.scale_dtype, q.weight_dtype) == (
        "Q4_0", 4, 32, "float16", "int4")
    assert q.bits_per_weight == round((2304 + 256 + 12800) * 8 / (4096 + 64 + 6400), 4)
    assert insp.dtype == "float16"  # the float type holding the most elements, not the first or the F32 norms
    assert "tensor types removed from ggml: Q4_0_4_4; requantise the model" in insp.warnings
    assert "tensor types unknown to qcheck's gguf tables: Q4_0_4_4 (bits/weight counts only known types)" \
        in insp.warnings
    assert not any("is not a llama.cpp file type" in w for w in insp.warnings)
    plain = _gguf({"general.file_type": 0}, {"a.weight": ("F32", (4, 4), 64)})
    assert (plain.quantization.gguf_file_type, plain.quantization.weight_dtype) == ("F32", "float32")
    assert _gguf({"general.file_type": 1}, {"a.weight": ("F16", (4, 4), 32)}).quantization.weight_dtype == "float16"
    mixed = _gguf({"general.file_type": 15}, {"a.weight": ("Q4_K", (256, 256), 36864)})
    assert (mixed.quantization.gguf_file_type, mixed.quantization.weight_dtype) == ("Q4_K_M", None)
    odd = _gguf({"general.file_type": 900}, {"a.weight": ("Q4_K", (256, 256), 36864)})
    assert odd.quantization.gguf_file_type == "unknown(900)"
    assert "general.file_type 900 is not a llama.cpp file type qcheck knows" in odd.warnings
    assert not any("removed from ggml" in w for w in odd.warnings)


# ----------------------------------------------------------------------------------------------- GPTQ/AWQ
def _gptq_scan(spec: dict, hints=None) -> dict:
    from qcheck.classify import gptq_awq
    from qcheck.classify.base import Hints

    ck = b.Fixture(spec).checkpoint()
    return {q.name: q for q in gptq_awq.scan(ck.tensors, set(), hints or Hints())}


def test_gptq_and_awq_packs_and_what_is_skipped():
    spec = {"x.qweight": ("I32", (16,)), "x.scales": ("F16", (1, 64)),  # 1-D: skipped, the scan goes on
            "y.qweight": ("I32", (16, 64)),  # no scales: skipped
            "z.qweight": ("I32", (16, 64)), "z.scales": ("F16", (64,)),  # 1-D scales: skipped
            **b.gptq("g", 64, 128), **b.awq_gemm("a", 64, 256),
            "w.qweight": ("I32", (16, 64)), "w.scales": ("F16", (1, 64)), "w.g_idx": ("I32", (0,))}
    from qcheck.classify.base import Hints

    out = _gptq_scan(spec, Hints(bits=4, group_size=128))
    assert set(out) == {"g", "a", "w"}
    g, a = out["g"], out["a"]
    assert (g.method, g.layout, g.bits, g.group_size, g.logical, g.granularity) == ("gptq", "gptq", 4, 128,
                                                                                     64 * 128, "group")
    assert (a.method, a.layout, a.bits, a.group_size, a.logical) == ("awq", "awq-gemm", 4, 128, 64 * 256)
    w = out["w"]  # an empty g_idx is no g_idx: GPTQ input rows from the bits (16 x 32 / 4)
    assert (w.method, w.layout, w.logical, w.tensors) == ("gptq", "gptq", 128 * 64, ["w.qweight", "w.scales"])
    from qcheck.classify import gptq_awq

    ck = b.Fixture(spec).checkpoint()
    assert {q.name for q in gptq_awq.scan(ck.tensors, {"g.qweight"}, Hints(bits=4))} == {"a", "w"}  # g claimed
    one = _gptq_scan({"o.qweight": ("I32", (1, 64)), "o.scales": ("F16", (1, 64)), "o.g_idx": ("I32", (1,))})
    assert (one["o"].logical, one["o"].bits) == (64, 32)  # a g_idx of one entry is one input (not "no g_idx")
    per_channel = _gptq_scan(b.gptq("c", 64, 128, group=-1), Hints(bits=4, group_size=-1))["c"]
    assert (per_channel.group_size, per_channel.granularity) == (-1, "per-channel")
    # rows the config's bits do not divide: the input size rounds down (an integer), the bits are not the config's
    odd = _gptq_scan({"d.qweight": ("I32", (25, 64)), "d.scales": ("F16", (1, 64))}, Hints(bits=3))["d"]
    assert (odd.logical, odd.bits) == (266 * 64, 32 * 25 / 266)


def test_gptq_packs_in_other_word_sizes_and_fused_experts():
    spec = {"e.qweight": ("I32", (4, 16, 64)), "e.scales": ("F16", (4, 1, 64)), "e.g_idx": ("I32", (128,)),
            "b.qweight": ("U8", (64, 64)), "b.scales": ("F16", (1, 64)), "b.g_idx": ("I32", (128,)),
            "s.qweight": ("I16", (32, 64)), "s.scales": ("F16", (1, 64)), "s.g_idx": ("I32", (128,)),
            "l.qweight": ("I64", (8, 64)), "l.scales": ("F16", (1, 64)), "l.g_idx": ("I32", (128,)),
            "i.qweight": ("I8", (64, 64)), "i.scales": ("F16", (1, 64)), "i.g_idx": ("I32", (128,)),
            "u.qweight": ("U32", (16, 64)), "u.scales": ("F16", (1, 64)), "u.g_idx": ("I32", (128,))}
    out = _gptq_scan(spec)
    assert (out["e"].logical, out["e"].bits) == (4 * 128 * 64, 4)  # the leading expert dimension counts
    assert [out[k].bits for k in ("b", "s", "l", "i", "u")] == [4, 4, 4, 4, 4]  # 8-, 16-, 64-, 8-, 32-bit words
    odd = _gptq_scan({"q.qweight": ("I32", (24, 64)), "q.scales": ("F16", (1, 64)), "q.g_idx": ("I32", (128,))})
    assert (odd["q"].bits, odd["q"].weight_dtype) == (6, "int6")
    frac = _gptq_scan({"q.qweight": ("I32", (10, 64)), "q.scales": ("F16", (1, 64)), "q.g_idx": ("I32", (96,))})
    assert frac["q"].bits == 32 * 10 / 96 and frac["q"].weight_dtype is None


def test_gptq_words_of_every_integer_dtype_and_no_guess_for_a_float_qweight():
    """The word size comes from the one dtype table: U16 and U64 words are 16 and 64 bits; a float ``qweight``
    packs nothing a GPTQ/AWQ kernel reads, so it is not taken as 32-bit words."""
    spec = {}
    for dtype in ("F16", "BF16", "F32", "F8_E4M3", "X9"):  # listed first: a skipped tensor does not end the scan
        spec[f"{dtype}.qweight"] = (dtype, (16, 64))
        spec[f"{dtype}.scales"] = ("F16", (1, 64))
        spec[f"{dtype}.g_idx"] = ("I32", (128,))
    spec.update({"h.qweight": ("U16", (32, 64)), "h.scales": ("F16", (1, 64)), "h.g_idx": ("I32", (128,)),
                 "w.qweight": ("U64", (8, 64)), "w.scales": ("F16", (1, 64)), "w.g_idx": ("I32", (128,))})
    from qcheck.classify import gptq_awq
    from qcheck.classify.base import Hints
    from qcheck.model import TensorInfo

    tensors = {n: TensorInfo(n, d, s) for n, (d, s) in spec.items()}
    out = {q.name: q for q in gptq_awq.scan(tensors, set(), Hints())}
    assert set(out) == {"h", "w"}
    assert [(out[k].bits, out[k].logical) for k in ("h", "w")] == [(4, 128 * 64), (4, 128 * 64)]


def test_awq_gemv_group_from_the_config_when_the_padding_hides_it():
    from qcheck.classify.base import Hints

    spec = b.awq_gemv("v", 64, 256, group=32)  # scales [64, 8]: 256 / 32 = 8 groups, already a multiple of 8
    (q,) = _gptq_scan(spec, Hints(bits=4, group_size=32)).values()
    assert (q.layout, q.bits, q.group_size, q.logical) == ("awq-gemv", 4, 32, 64 * 256)
    padded = b.awq_gemv("v", 64, 256, group=128)  # 2 groups padded to 8 columns
    (q,) = _gptq_scan(padded, Hints(bits=4, group_size=128)).values()
    assert q.group_size == 128
    (q,) = _gptq_scan(padded, Hints(bits=4)).values()  # no config group: the padded columns give 32
    assert q.group_size == 32
    (q,) = _gptq_scan(padded, Hints(bits=4, group_size=64)).values()  # 4 groups also pad to 8 columns: taken
    assert q.group_size == 64
    (q,) = _gptq_scan(padded, Hints(bits=4, group_size=16)).values()  # 16 groups would be 16 columns: not this
    assert q.group_size == 32
    (q,) = _gptq_scan(padded, Hints(group_size=128)).values()  # no bits: 4
    assert (q.bits, q.logical) == (4, 64 * 256)
    (q,) = _gptq_scan(b.awq_gemv("v", 64, 256, group=128, ), Hints(bits=8, group_size=128)).values()
    assert (q.bits, q.logical) == (8, 64 * 128)
    (q,) = _gptq_scan(b.awq_gemv("v", 2, 256, group=128), Hints(bits=4)).values()  # two rows: still GEMV
    assert (q.layout, q.logical) == ("awq-gemv", 2 * 256)
    seventeen = b.awq_gemv("v", 64, 17 * 128, group=128)  # 17 groups padded to 24 columns
    (q,) = _gptq_scan(seventeen, Hints(bits=4, group_size=128)).values()
    assert (q.group_size, q.logical) == (128, 64 * 17 * 128)
    experts = {"v.qweight": ("I32", (4, 64, 32)), "v.scales": ("F16", (4, 64, 8))}  # a stack of 4 GEMV experts
    (q,) = _gptq_scan(experts, Hints(bits=4, group_size=32)).values()
    assert (q.layout, q.logical, q.group_size) == ("awq-gemv", 4 * 64 * 256, 32)
    # 8-bit words of 3 columns hold 12 inputs; group 1 pads 12 scales to 16 columns
    (q,) = _gptq_scan({"v.qweight": ("I32", (64, 3)), "v.scales": ("F16", (64, 16))}, Hints(bits=8, group_size=1)
                      ).values()
    assert (q.layout, q.logical, q.group_size) == ("awq-gemv", 64 * 12, 1)
    (q,) = _gptq_scan({"v.qweight": ("I32", (64, 10)), "v.scales": ("F16", (64, 8))}, Hints(bits=3)).values()
    assert q.logical == 64 * 106  # 10 x 32 / 3 rounds down: an integer count
    single = {"v.qweight": ("I32", (1, 8)), "v.scales": ("F16", (1, 64))}  # one row, one scale row: GEMM
    (q,) = _gptq_scan(single, Hints(bits=4)).values()
    assert q.layout == "awq-gemm"


def _gptq_config(quant: dict | None, side: dict | None = None, side_name: str = "quantize_config.json",
                 qlinears=()):
    from qcheck.classify import gptq_awq
    from qcheck.classify.base import Draft

    configs = {"config.json": {"quantization_config": quant} if quant is not None else {}}
    if side is not None:
        configs[side_name] = side
    view = _view(**configs)
    draft = Draft(tensors={}, metadata={}, qlinears=list(qlinears))
    family = "awq" if (view.quant_method == "awq" or (side or {}).get("w_bit")) else (view.quant_method or "gptq")
    gptq_awq.apply_config(view, draft, family, None)
    return draft


def test_gptq_side_config_disagreement_and_where():
    d = _gptq_config({"quant_method": "gptq", "bits": 4, "group_size": 128}, {"bits": 8, "group_size": 128})
    assert [(f.where, f.message) for f in d.findings] == [
        ("quantize_config.json", "bits 8 disagrees with config.json quantization_config bits 4")]
    assert (d.expected_bits, d.expected_group, d.config_method) == (4, 128, "gptq")
    alone = _gptq_config(None, {"bits": 8, "group_size": 64, "desc_act": True, "sym": False})
    assert (alone.expected_bits, alone.expected_group, alone.config_method, alone.findings) == (
        8, 64, "(quantize_config.json)", [])
    assert (alone.act_order, alone.zero_point, alone.producer) == (True, True, "auto-gptq")
    other = _gptq_config(None, {"bits": 4}, side_name="quant_config.json")
    assert other.config_method == "(quant_config.json)"
    named = _gptq_config({"quant_method": "gptq", "bits": 4}, {"bits": 8}, side_name="quant_config.json")
    assert [f.where for f in named.findings] == ["quant_config.json"]
    same = _gptq_config({"quant_method": "gptq", "bits": 4}, {"bits": 4, "group_size": 32})
    assert same.findings == [] and same.expected_group == 32


@pytest.mark.parametrize("packing, family, fmt", [("auto_round:auto_awq", "awq", "auto_round:auto_awq"),
                                                  ("auto_round:auto_gptq", "gptq", "auto_round:auto_gptq"),
                                                  (None, "gptq", None)])
def test_auto_round_packing_decides_gptq_or_awq(packing, family, fmt):
    from qcheck.classify import gptq_awq
    from qcheck.classify.base import Draft

    quant = {"quant_method": "auto-round", "bits": 4, "group_size": 128}
    if packing:
        quant["packing_format"] = packing
    draft = Draft(tensors={}, metadata={}, qlinears=[])
    gptq_awq.apply_config(_view(**{"config.json": {"quantization_config": quant}}), draft, "auto-round", None)
    assert (draft.expected_method, draft.producer, draft.format) == (family, "auto-round", fmt)


def test_awq_version_against_the_layout_names_the_config():
    gemm = [_layer(method="awq", layout="awq-gemm")]
    gemv = [_layer(method="awq", layout="awq-gemv")]
    d = _gptq_config({"quant_method": "awq", "bits": 4, "version": "GEMV"}, qlinears=gemm)
    assert [(f.where, f.message) for f in d.findings] == [
        ("config.json quantization_config", "AWQ version 'gemv', but the qweight/scales shapes are the GEMM layout")]
    d = _gptq_config({"quant_method": "awq", "bits": 4, "version": "gemm"}, qlinears=gemv)
    assert [(f.where, f.message) for f in d.findings] == [
        ("config.json quantization_config", "AWQ version 'gemm', but the qweight/scales shapes are the GEMV layout")]
    assert _gptq_config({"quant_method": "awq", "version": "gemm"}, qlinears=gemm).findings == []
    assert _gptq_config({"quant_method": "awq", "backend": "LLM-AWQ"}).producer == "llm-awq"
    assert _gptq_config({"quant_method": "awq"}).producer == "autoawq"


# ------------------------------------------------------------------------------------------------------ MLX
@pytest.mark.parametrize("block, hints", [
    ({"bits": 4, "group_size": 64}, (4, 64)), ({"mode": "mxfp4"}, (4, 32)), ({"mode": "NVFP4"}, (4, 16)),
    ({"mode": "mxfp8"}, (8, 32)), ({}, (None, None)), ({"mode": None, "bits": 3}, (3, 64)),
    ({"mode": "unheard-of"}, (4, 64)), ({"group_size": 32}, (4, 32))])
def test_mlx_hints_per_mode(block, hints):
    from qcheck.classify.mlx import hints_from

    assert hints_from(block).for_module("x") == hints


def test_mlx_hints_from_the_block_or_a_quant_method_mlx_config():
    from qcheck.classify.configs import ConfigView
    from qcheck.classify.mlx import view_hints

    quant = {"quant_method": "mlx", "bits": 8, "group_size": 32}
    assert view_hints(ConfigView(quant=quant)).for_module("x") == (8, 32)
    assert view_hints(ConfigView(quant=quant, mlx={"bits": 3, "group_size": 64})).for_module("x") == (3, 64)


def test_mlx_overrides_and_mixed_bits():
    from qcheck.classify.mlx import hints_from

    h = hints_from({"bits": 4, "group_size": 64, "a": {"bits": 8}, "b": {"group_size": 32}, "c": {"x": 1}, "d": False})
    assert h.overrides == {"a": (8, None), "b": (None, 32)}
    assert [h.for_module(m) for m in "abcd"] == [(8, 64), (4, 32), (4, 64), (4, 64)]


def _mlx_scan(spec: dict, hints=None) -> dict:
    from qcheck.classify import mlx
    from qcheck.classify.base import Hints

    ck = b.Fixture(spec).checkpoint()
    return {q.name: q for q in mlx.scan(ck.tensors, set(), hints or Hints())}


def test_mlx_scans_from_the_shapes_and_the_hints():
    from qcheck.classify.base import Hints

    spec = {"s.weight": ("U32", (8,)), "n.weight": ("U32", (64, 16)),  # 1-D; no scales: skipped, scan goes on
            "e.weight": ("U32", (64, 16)), "e.scales": ("BF16", (64, 0)),  # no scale columns: skipped
            **b.mlx_affine("a", 64, 128, bits=4, group=64), **b.mlx_mx("m", 64, 128, bits=4, group=32)}
    out = _mlx_scan(spec)
    assert set(out) == {"a", "m"}
    a = out["a"]
    assert (a.bits, a.group_size, a.logical, a.zero_point, a.weight_dtype, a.layout) == (
        4, 64, 64 * 128, True, "int4", "mlx")
    m = out["m"]  # no hint: group 64 is assumed, bits from it: 32 x 16 / (4 x 64) = 2 -> then the group is 32
    assert (m.bits, m.group_size, m.zero_point, m.weight_dtype) == (2, 64, False, None)
    assert _mlx_scan(b.mlx_mx("m", 64, 128, bits=4, group=32), Hints(bits=4, group_size=32))["m"].group_size == 32
    (q,) = _mlx_scan(b.mlx_affine("a", 64, 128, bits=3, group=64), Hints(group_size=64)).values()
    assert q.bits is None or q.bits == 3
    (q,) = _mlx_scan(b.mlx_affine("a", 64, 128, bits=8, group=32), Hints(bits=8)).values()
    assert (q.bits, q.group_size) == (8, 32)  # the group from the shapes, not the hint's default
    (q,) = _mlx_scan(b.mlx_affine("a", 64, 96, bits=4, group=32), Hints(bits=4, group_size=64)).values()
    assert q.group_size == 32
    (q,) = _mlx_scan(b.mlx_affine("a", 64, 128, bits=4, group=128), Hints(bits=4)).values()  # one scale column
    assert (q.group_size, q.logical) == (128, 64 * 128)
    # bits known, no group, and scales that do not divide the 128 inputs: no group (not the default 64)
    (q,) = _mlx_scan({"a.weight": ("U32", (64, 16)), "a.scales": ("BF16", (64, 3))}, Hints(bits=4)).values()
    assert (q.bits, q.group_size, q.logical) == (4, None, 64 * 128)
    metal = {n.replace(".biases", ".qbiases"): t for n, t in b.mlx_affine("t", 64, 128).items()}
    (q,) = _mlx_scan(metal).values()
    assert (q.layout, q.producer, q.zero_point) == ("mlx-metal", "transformers (metal)", True)
    (q,) = _mlx_scan({"o.weight": ("U32", (64, 16)), "o.scales": ("BF16", (64, 3))}).values()
    assert (q.bits, q.logical) == (None, None)  # 32 x 16 / (3 x 64) is no whole number of bits


# ------------------------------------------------------------------------------------------------ KV scales
def _kv(names: list[str], declared: str | None = None, static: bool | None = None):
    from qcheck.classify.base import Draft
    from qcheck.classify.kv_scales import kv_scales
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    tensors = {n: TensorInfo(n, "F32", (), 4) for n in names}
    draft = Draft(tensors=tensors, metadata={}, qlinears=[], kv_cache_declared=declared, kv_cache_static=static)
    return kv_scales(TensorTable(tensors), draft), draft


def test_kv_scales_per_attention_layer_and_the_missing_ones():
    names = [f"model.layers.{i}.self_attn.k_proj.weight" for i in range(12)]
    names += [f"model.layers.{i}.self_attn.{kv}_scale" for i in range(2) for kv in ("k", "v")]
    names += ["vision_tower.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.q_scale"]
    scales, _ = _kv(names)
    assert (scales.attention_layers, scales.k_scales, scales.v_scales, scales.q_scales) == (12, 2, 2, 1)
    assert scales.missing == [f"model.layers.{i}" for i in range(2, 10)]  # the first 8, in natural order
    plain, _ = _kv(names[:12])
    assert plain.missing == []  # no scale at all and nothing declared: nothing to point at
    loose, _ = _kv(["model.layers.0.attn.k_scale", "model.layers.1.attn.k_scale", "model.layers.1.attn.v_scale",
                    "unlayered.k_scale"])
    assert (loose.attention_layers, loose.k_scales, loose.v_scales) == (0, 2, 1)  # no K projection known: counted


def test_a_declared_static_kv_cache_without_every_scale_is_a_mismatch():
    from qcheck.classify.kv_scales import check_declared

    names = [f"model.layers.{i}.self_attn.k_proj.weight" for i in range(3)]
    names += ["model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"]
    scales, draft = _kv(names, declared="kv_cache_scheme", static=True)
    check_declared(scales, "float8_e4m3", draft)
    assert [(f.where, f.message) for f in draft.findings] == [(
        "kv_cache_scheme", "declares a static float8_e4m3 KV cache, but k_scale/v_scale tensors cover 1 of 3 "
        "attention layers (e.g. model.layers.1): engines that read the declaration use a scale of 1.0 there")]
    scales, draft = _kv(names, declared="kv_cache_scheme", static=False)
    check_declared(scales, "float8_e4m3", draft)
    assert draft.findings == []


# -------------------------------------------------------------------------------------------------- ModelOpt
def _from_algo_name(algo: str) -> tuple[str, int, str | None, str | None, int | None]:
    """What ModelOpt's quant_algo names say (W<bits>A<bits>, _WO weight-only, _PC per-channel, _PB per-block, NVFP4
    groups of 16, MX groups of 32, SQ SmoothQuant INT8): the rule each row of ALGOS follows."""
    if "NVFP4" in algo:
        method, group, gran = "nvfp4", 16, "group"
    elif "MXFP4" in algo:
        method, group, gran = "mxfp4", 32, "group"
    elif algo == "MXFP8":
        method, group, gran = "mxfp8", 32, "group"
    elif "AWQ" in algo:
        method, group, gran = "awq", None, "group"
    elif "INT8" in algo or algo.startswith("W8A"):
        method, group, gran = "int8", -1, "per-channel"
    elif "_PB_" in algo:
        method, group, gran = "fp8", None, "block"
    elif "_PC_" in algo or "PER_CHANNEL" in algo:
        method, group, gran = "fp8", -1, "per-channel"
    else:
        method, group, gran = "fp8", None, "per-tensor"
    bits = 4 if method in ("nvfp4", "mxfp4", "awq") else 8
    if algo.endswith(("_WO", "A16")) or "A16_" in algo or algo in ("MXFP4", "W4A16_AWQ", "INT4_AWQ"):
        act = None
    elif "A8" in algo and bits == 4:
        act = "float8_e4m3"
    elif method == "int8":
        act = "int8"
    elif method == "nvfp4":
        act = "fp4_e2m1"
    else:
        act = "float8_e4m3"
    return method, bits, act, gran, group


def test_every_modelopt_algorithm_row_follows_its_name():
    from qcheck.classify.modelopt import ACT_SCHEMES, ALGOS

    assert {algo: _from_algo_name(algo) for algo in ALGOS} == ALGOS
    assert set(ACT_SCHEMES) <= set(ALGOS)
    for algo, (_, _, act, _, _) in ALGOS.items():
        if algo not in ACT_SCHEMES:
            continue
        assert act is not None and ACT_SCHEMES[algo].startswith("dynamic per-"), algo


def _modelopt(hf: dict | None, quant: dict | None = None, tensor_method: str | None = None):
    from qcheck.classify import modelopt
    from qcheck.classify.base import Draft

    configs = {}
    if hf is not None:
        configs["hf_quant_config.json"] = {"producer": {"name": "modelopt"}, "quantization": hf}
    if quant is not None:
        configs["config.json"] = {"quantization_config": {"quant_method": "modelopt", **quant}}
    draft = Draft(tensors={}, metadata={}, qlinears=[])
    modelopt.apply_config(_view(**configs), draft, "modelopt", tensor_method)
    return draft


def test_modelopt_configs_at_their_edges():
    d = _modelopt({"quant_algo": "fp8_pb_real", "kv_cache_quant_algo": "fp8"})
    assert (d.expected_method, d.expected_bits, d.scale_granularity, d.expected_block, d.activation_scheme) == (
        "fp8", 8, "block", [128, 128], "dynamic per-token-group 128")
    assert (d.kv_cache_dtype, d.kv_cache_declared, d.kv_cache_static, d.config_method) == (
        "float8_e4m3", "kv_cache_quant_algo", True, "FP8_PB_REAL")
    d = _modelopt({"quant_algo": "FP8"}, {"quant_algo": "NVFP4"})
    assert [(f.where, f.message) for f in d.findings] == [
        ("hf_quant_config.json", "quant_algo FP8 disagrees with config.json quantization_config quant_algo NVFP4")]
    d = _modelopt(None, {"quant_algo": "NVFP4", "kv_cache_scheme": "custom"})
    assert (d.expected_method, d.kv_cache_dtype, d.kv_cache_declared) == ("nvfp4", "custom", None)
    d = _modelopt({"quant_algo": "W4A16_AWQ", "group_size": 64, "has_zero_point": True})
    assert (d.expected_group, d.zero_point, d.activation_scheme) == (64, True, None)
    d = _modelopt({"quant_algo": "W4A16_AWQ", "has_zero_point": "yes"})
    assert (d.expected_group, d.zero_point) == (None, None)
    d = _modelopt({"quant_algo": "INT8_SQ"}, {"group_size": 128})
    assert (d.expected_group, d.activation_scheme, d.zero_point) == (128, "dynamic per-token", None)
    assert _modelopt({"quant_algo": "FP8"}).activation_scheme == "static per-tensor"
    assert "ModelOpt config has no quant_algo" in _modelopt({}).warnings
    unknown = _modelopt({"quant_algo": "FP3"})
    assert "unknown ModelOpt quant_algo 'FP3'; classified from tensors" in unknown.warnings
    assert unknown.expected_method is None


def test_modelopt_mixed_precision_picks_the_layers_of_the_tensors_method():
    layers = {"a": {"quant_algo": "NVFP4"}, "b": {"quant_algo": "fp8"}, "c": {"quant_algo": "NVFP4"}, "d": "junk",
              "e": {"quant_algo": None}, "f": {"quant_algo": "FP3"}}
    d = _modelopt({"quant_algo": "MIXED_PRECISION", "quantized_layers": layers}, tensor_method="fp8")
    assert (d.expected_method, d.format, d.declared_methods) == ("fp8", "MIXED_PRECISION", ["fp8", "nvfp4"])
    assert "ModelOpt MIXED_PRECISION checkpoint: layers use FP3, FP8, NVFP4" in d.warnings
    first = _modelopt({"quant_algo": "MIXED_PRECISION", "quantized_layers": layers}, tensor_method="awq")
    assert first.expected_method is None  # no layer of the tensors' method: the first algo (FP3) is unknown
    one = _modelopt({"quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": {"quant_algo": "NVFP4"}}})
    assert one.expected_method == "nvfp4" and not any("layers use" in w for w in one.warnings)
    none = _modelopt({"quant_algo": "MIXED_PRECISION", "quantized_layers": {}})
    assert "ModelOpt config has no quant_algo" in none.warnings


def test_modelopt_int4_awq_scan():
    from qcheck.classify import modelopt
    from qcheck.classify.base import Hints

    spec = {"x.weight": ("U8", (64,)), "y.weight": ("U8", (32, 128)),  # 1-D; no scale: skipped
            "d.weight": ("U8", (64,)), "d.weight_scale": ("F16", (64, 1)),  # 1-D even with a scale: skipped
            "c.weight": ("U8", (32, 128)), "c.weight_scale": ("BF16", (64, 1)),  # claimed by another scanner
            "z.weight": ("U8", (32, 128)), "z.weight_scale": ("U8", (64, 1)),  # a U8 scale is another format's
            "w.weight": ("U8", (32, 128)), "w.weight_scale": ("F16", (64,)),  # 1-D scale: skipped
            "v.weight": ("U8", (32, 128)), "v.weight_scale": ("F16", (32, 1)),  # rows not 2 x packed rows
            "a.weight": ("U8", (32, 128)), "a.weight_scale": ("BF16", (64, 1)),
            "a.pre_quant_scale": ("BF16", (128,)), "a.input_scale": ("F32", ()),
            "b.weight": ("U8", (32, 128)), "b.weight_scale": ("F32", (64, 2)), "b.weight_scale_2": ("F32", ())}
    ck = b.Fixture(spec).checkpoint()
    out = {q.name: q for q in modelopt.scan(ck.tensors, {"c.weight"}, Hints())}
    assert set(out) == {"a", "b"}
    a, bq = out["a"], out["b"]
    assert (a.logical, a.bits, a.group_size, a.weight_dtype, a.scale_dtype, a.zero_point, a.input_scale) == (
        64 * 128, 4, 128, "int4", "bfloat16", False, True)
    assert a.tensors == ["a.weight", "a.weight_scale", "a.pre_quant_scale", "a.input_scale"]
    assert (bq.group_size, bq.input_scale, bq.tensors[-1]) == (64, False, "b.weight_scale_2")


def _mlx_config(configs: dict, qlinears=()):
    from qcheck.classify import mlx
    from qcheck.classify.base import Draft

    draft = Draft(tensors={}, metadata={}, qlinears=list(qlinears))
    mlx.apply_config(_view(**configs), draft, "mlx", "mlx")
    return draft


def test_mlx_configs_modes_overrides_and_exclusions():
    layer = _layer(method="mlx", layout="mlx", bits=4, group_size=32, zero_point=True)
    d = _mlx_config({"config.json": {"quantization": {"mode": "mxfp4", "bits": 4, "group_size": 32}}}, [layer])
    assert (d.producer, d.config_method, d.expected_bits, d.expected_group, d.format, d.zero_point) == (
        "mlx-lm", "mlx", 4, 32, "mxfp4", False)
    assert (d.weight_dtype, layer.weight_dtype, layer.scale_dtype, layer.zero_point) == (
        "fp4_e2m1", "fp4_e2m1", "e8m0", False)
    affine = _mlx_config({"config.json": {"quantization": {"bits": 3}}})
    assert (affine.expected_bits, affine.expected_group, affine.zero_point, affine.weight_dtype) == (3, 64, True, None)
    assert _mlx_config({"config.json": {"quantization": {"mode": "nvfp4"}}}).expected_group == 16
    metal = _mlx_config({"config.json": {"quantization_config": {"quant_method": "metal", "bits": 8}}})
    assert (metal.producer, metal.config_method, metal.expected_bits) == ("transformers (metal)", "metal", 8)
    # a quant_method "mlx" config is MLX's, not transformers' metal layout
    mlx_method = _mlx_config({"config.json": {"quantization_config": {"quant_method": "mlx", "bits": 8}}})
    assert (mlx_method.producer, mlx_method.config_method) == ("mlx-lm", "mlx")
    mixed = _mlx_config({"config.json": {
        "quantization": {"bits": 4, "group_size": 64, "lm_head": False, "model.layers.0.mlp": {"bits": 8},
                         "model.layers.1.mlp": {"group_size": 32}},
        "quantization_config": {"bits": 4, "group_size": 64, "modules_to_not_convert": ["lm_head", "vision"]}}})
    assert mixed.excluded == ["lm_head", "vision"]
    assert "MLX mixed quantisation: per-module overrides use 4/8 bits" in mixed.warnings
    same = _mlx_config({"config.json": {"quantization": {"bits": 4, "group_size": 64, "m": {"group_size": 32}}}})
    assert not any("mixed quantisation" in w for w in same.warnings)


# ---------------------------------------------------------------------------------------- FP4/FP6 (mx.py)
def test_mxfp4_config_names_gpt_oss_only_when_a_layer_has_its_expert_blocks():
    from qcheck.classify import mx
    from qcheck.classify.base import Draft

    view = _view(**{"config.json": {"quantization_config": {"quant_method": "mxfp4",
                                                            "modules_to_not_convert": ["lm_head"]}}})

    def producer(*layouts: str) -> str | None:
        layers = [_layer(name=f"l{i}", layout=layout) for i, layout in enumerate(layouts)]
        draft = Draft(tensors={}, metadata={}, qlinears=layers)
        mx.apply_config(view, draft, "mxfp4", "mxfp4")
        assert (draft.expected_method, draft.expected_bits, draft.expected_group, draft.excluded) == (
            "mxfp4", 4, 32, ["lm_head"])
        return draft.producer

    assert producer("mxfp4-gpt-oss", "mxfp4-gpt-oss") == "gpt-oss"
    assert producer("mxfp4-packed", "mxfp4-gpt-oss") == "gpt-oss"
    assert producer("mxfp4-packed") is None and producer() is None


def test_gpt_oss_blocks_of_a_plain_matrix():
    """``*_blocks`` [rows, 16] with ``*_scales`` [rows]: one row of 32 values per scale, no expert dimension."""
    (q,) = _mx_scan({"m.down_proj_blocks": ("U8", (64, 16)), "m.down_proj_scales": ("U8", (64,))}).values()
    assert (q.layout, q.logical, q.group_size) == ("mxfp4-gpt-oss", 64 * 32, 32)


def test_a_layer_sharing_a_tensor_another_layout_claimed_is_not_counted_twice():
    """compressed-tensors claims x.weight_packed and x.weight_scale first; the FP8 scanner's x (x.weight with the
    same scale) is dropped, and the FP8 layer after it is still found."""
    from qcheck.classify.base import Hints
    from qcheck.classify.fingerprints import scan_all

    spec = {"x.weight_packed": ("I32", (64, 16)), "x.weight_scale": ("BF16", (64, 1)),
            "x.weight": ("F8_E4M3", (64, 64)), "y.weight": ("F8_E4M3", (64, 64))}
    found = scan_all(b.Fixture(spec).checkpoint().tensors, {}, Hints(bits=4))
    assert [(q.name, q.method, q.tensors) for q in found] == [
        ("x", "int4", ["x.weight_packed", "x.weight_scale"]), ("y", "fp8", ["y.weight"])]


def _mx_scan(spec: dict) -> dict:
    from qcheck.classify import mx
    from qcheck.classify.base import Hints

    ck = b.Fixture(spec).checkpoint()
    return {q.name: q for q in mx.scan(ck.tensors, {"c.weight"}, Hints())}


@pytest.mark.parametrize("spec, expected", [
    ({"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 8)), "m.weight_scale_2": ("F32", ()),
      "m.input_scale": ("F32", ())},
     ("nvfp4", "nvfp4-modelopt", "modelopt", 16, 64 * 128, 4, True, ["m.weight", "m.weight_scale",
                                                                     "m.weight_scale_2", "m.input_scale"])),
    ({"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 8))},
     ("nvfp4", "nvfp4-modelopt", None, 16, 64 * 128, 4, False, ["m.weight", "m.weight_scale"])),
    ({"m.weight_packed": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 8)),
      "m.weight_global_scale": ("F32", (1,)), "m.input_global_scale": ("F32", (1,))},
     ("nvfp4", "nvfp4-compressed-tensors", "compressed-tensors", 16, 64 * 128, 4, True,
      ["m.weight_packed", "m.weight_scale", "m.weight_global_scale", "m.input_global_scale"])),
    ({"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 8)), "m.weight_global_scale": ("F32", (1,))},
     ("nvfp4", "nvfp4-compressed-tensors", "compressed-tensors", 16, 64 * 128, 4, False,
      ["m.weight", "m.weight_scale", "m.weight_global_scale"])),
    ({"m.weight": ("F4", (64, 128)), "m.weight_scale": ("F8_E4M3", (64, 8))},
     ("nvfp4", "nvfp4-modelopt", None, 16, 64 * 128, 4, False, ["m.weight", "m.weight_scale"])),
    ({"m.weight_packed": ("U8", (64, 64)), "m.weight_scale": ("U8", (64, 4))},
     ("mxfp4", "mxfp4-compressed-tensors", "compressed-tensors", 32, 64 * 128, 4, False,
      ["m.weight_packed", "m.weight_scale"])),
    ({"m.weight": ("F4", (64, 128)), "m.weight_scale": ("F8_E8M0", (64, 4)), "m.input_scale": ("F32", ())},
     ("mxfp4", "mxfp4-packed", None, 32, 64 * 128, 4, True, ["m.weight", "m.weight_scale", "m.input_scale"])),
    ({"m.weight": ("F6_E2M3", (64, 128)), "m.weight_scale": ("U8", (64, 4))},
     ("mxfp6", "mxfp6-packed", None, 32, 64 * 128, 6, False, ["m.weight", "m.weight_scale"])),
    ({"m.weight": ("F6_E3M2", (64, 128)), "m.weight_scale": ("U8", (64, 4))},
     ("mxfp6", "mxfp6-packed", None, 32, 64 * 128, 6, False, ["m.weight", "m.weight_scale"])),
    ({"m.weight": ("U8", (64, 64)), "m.weight_scale": ("U8", (64, 1))},  # one MX scale per row: a group of 128
     ("mxfp4", "mxfp4-packed", None, 128, 64 * 128, 4, False, ["m.weight", "m.weight_scale"])),
    ({"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64,))},  # a 1-D scale: its length is the groups
     ("nvfp4", "nvfp4-modelopt", None, 2, 64 * 128, 4, False, ["m.weight", "m.weight_scale"])),
])
def test_fp4_fp6_group_layouts(spec, expected):
    out = _mx_scan({"c.weight": ("U8", (64, 64)), "c.weight_scale": ("F8_E4M3", (64, 8)), **spec})
    assert set(out) == {"m"}
    q = out["m"]
    got = (q.method, q.layout, q.producer, q.group_size, q.logical, q.bits, q.input_scale, q.tensors)
    assert got == expected
    assert q.scale_dtype == ("float8_e4m3" if q.method == "nvfp4" else "e8m0")


@pytest.mark.parametrize("spec", [
    {"m.weight": ("U8", (64,)), "m.weight_scale": ("F8_E4M3", (8,))},  # 1-D weight
    {"m.weight": ("U8", (64, 64))},  # no scale
    {"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", ())},  # a scalar scale
    {"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 0))},  # no scale columns
    {"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (32, 8))},  # not one scale row per output row
    {"m.weight": ("F6_E2M3", (64, 128)), "m.weight_scale": ("F8_E4M3", (64, 8))},  # FP6 with FP8 scales
    {"m.weight": ("U8", (64, 64)), "m.weight_scale": ("F16", (64, 8))},  # 16-bit scales: another format's
    {"m.bias": ("U8", (64, 64)), "m.weight_scale": ("F8_E4M3", (64, 8))},  # not a weight
])
def test_fp4_fp6_layouts_that_are_not(spec):
    assert _mx_scan(spec) == {}


def test_gpt_oss_expert_blocks():
    spec = {"e.gate_up_proj_blocks": ("U8", (4, 256, 4, 16)), "e.gate_up_proj_scales": ("U8", (4, 256, 4)),
            "f.down.blocks": ("U8", (4, 128, 8, 16)), "f.down.scales": ("U8", (4, 128, 8)),
            "g.x_blocks": ("U8", (4, 256, 4, 16)), "g.x_scales": ("U8", (4, 256, 5)),  # scales do not match
            "h.x_blocks": ("U8", (4, 256, 4, 8)), "h.x_scales": ("U8", (4, 256, 4)),  # 8 bytes: not 32 values
            "i.x_blocks": ("U8", (16,)), "i.x_scales": ("U8", ())}
    out = _mx_scan(spec)
    assert set(out) == {"e.gate_up_proj", "f.down"}
    e = out["e.gate_up_proj"]
    assert (e.method, e.layout, e.logical, e.group_size, e.producer) == ("mxfp4", "mxfp4-gpt-oss", 4 * 256 * 4 * 32,
                                                                          32, "gpt-oss")
    assert out["f.down"].tensors == ["f.down.blocks", "f.down.scales"]


# ------------------------------------------------------------------------------------------ parameter count
@pytest.mark.parametrize("name, side", [("m.weight_scale", True), ("m._weight_scale", True), ("m._weight_zero_point",
                                        True), ("m.attn_scale", False), ("m._bias", False), ("m.weight", False),
                                        ("m.weight.quant_state.bitsandbytes__nf4", True), ("m.weight:scale", True),
                                        ("m.weight:zero_point", True), ("m.weight:qdata", False), ("g_idx", True)])
def test_side_tensors(name, side):
    from qcheck.classify.params import is_side_tensor

    assert is_side_tensor(name) is side
    assert is_side_tensor(name) is side  # the memo gives the same answer


def test_logical_parameters_count_unknown_layers_as_stored_and_name_them():
    from qcheck.classify.params import logical_parameters
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    tensors = {n: TensorInfo(n, d, s, 1) for n, d, s in (
        ("a.qweight", "I32", (16, 64)), ("a.scales", "F16", (1, 64)), ("b.weight", "U8", (32, 32)),
        ("b.weight_scale", "F8_E4M3", (32, 2)), ("norm.weight", "BF16", (64,)), ("c.k_scale", "F32", ()))}
    layers = [_layer(name="a", tensors=["a.qweight", "a.scales"], logical=8192),
              _layer(name="b", tensors=["b.weight", "b.weight_scale"], logical=None),
              _layer(name="gone", tensors=["gone.weight"], logical=None)]
    for table in (None, TensorTable(tensors)):
        total, unknown = logical_parameters(tensors, layers, table)
        assert (total, unknown) == (8192 + 32 * 32 + 64, ["b", "gone"])
    assert logical_parameters(tensors, [], TensorTable(tensors)) == (16 * 64 + 64 + 32 * 32 + 64, [])
    side_only = {n: TensorInfo(n, "F32", (4, 4), 64) for n in ("a.weight_scale", "a.input_scale", "b.k_scale")}
    for table in (None, TensorTable(side_only)):  # quantisation state alone holds no model parameter
        assert logical_parameters(side_only, [], table) == (0, [])
