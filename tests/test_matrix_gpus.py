"""``--gpu`` matching: products, architectures, compute capabilities; close matches for unknown names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qcheck.errors import UsageError
from qcheck.matrix.gpus import normalise, parse_cc_name
from qcheck.matrix.loader import load_matrix

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"


@pytest.fixture(scope="module")
def table():
    return load_matrix(TEST_MATRIX).gpus


@pytest.mark.parametrize(
    ("name", "label", "gpu", "arch", "cc"),
    [
        ("h100", "h100", "h100", "hopper", "9.0"),
        ("H100 PCIe", "h100", "h100", "hopper", "9.0"),
        ("h100-pcie", "h100", "h100", "hopper", "9.0"),
        ("RTX 4090", "rtx-4090", "rtx-4090", "ada", "8.9"),
        ("rtx4090", "rtx-4090", "rtx-4090", "ada", "8.9"),
        ("GeForce_RTX_4090", "rtx-4090", "rtx-4090", "ada", "8.9"),
        ("rtx-3090", "rtx-3090", "rtx-3090", "ampere", "8.6"),  # product cc, not the family default
        ("Hopper", "hopper", None, "hopper", "9.0"),
        ("AMPERE", "ampere", None, "ampere", "8.0"),
        ("sm_90a", "hopper", None, "hopper", "9.0"),  # an alias
        ("sm90", "sm90", None, "hopper", "9.0"),
        ("9.0", "sm90", None, "hopper", "9.0"),
        ("90", "sm90", None, "hopper", "9.0"),
        ("sm86", "sm86", None, "ampere", "8.6"),
        ("8.6", "sm86", None, "ampere", "8.6"),
        ("sm_103", "sm103", None, "blackwell", "10.3"),
        ("10.0", "sm100", None, "blackwell", "10.0"),
        ("gfx942", "cdna3", None, "cdna3", None),
        ("Instinct MI300X", "mi300x", "mi300x", "cdna3", None),
        ("M3 Max", "m3-max", "m3-max", "apple", None),
        ("cpu", "cpu", "cpu", "cpu-x86", None),
    ],
)
def test_lookup(table, name: str, label: str, gpu: str | None, arch: str, cc: str | None) -> None:
    target = table.lookup(name)
    assert (target.label, target.gpu, target.arch.id, target.cc) == (label, gpu, arch, cc)


def test_vendor_comes_from_the_arch(table) -> None:
    assert table.lookup("mi300x").vendor == "amd"
    assert table.lookup("t4").sm == "sm75"


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("h10", "h100"), ("rtx-4900", "rtx-4090"), ("hoper", "hopper"), ("mi300", "mi300x"), ("a1000", "a100")],
)
def test_unknown_name_lists_close_matches(table, name: str, suggestion: str) -> None:
    with pytest.raises(UsageError) as info:
        table.lookup(name)
    message = str(info.value)
    assert f"unknown GPU {name!r}" in message
    assert "did you mean:" in message and suggestion in message.split("did you mean:")[1]
    assert info.value.exit_code == 2


def test_unknown_name_without_close_match(table) -> None:
    with pytest.raises(UsageError) as info:
        table.lookup("toaster")
    assert "did you mean" not in str(info.value)
    assert "compute capability like sm90" in str(info.value)


def test_unknown_compute_capability_lists_known_ones(table) -> None:
    with pytest.raises(UsageError) as info:
        table.lookup("sm61")
    assert "compute capability 6.1" in str(info.value)
    assert "sm70, sm75, sm80, sm86, sm89, sm90, sm100, sm103" in str(info.value)


def test_normalise_and_cc_parsing() -> None:
    assert normalise(" RTX_4090 Ti/Super ") == "rtx4090tisuper"
    assert parse_cc_name("sm_121") == "12.1"
    assert parse_cc_name("12.1") == "12.1"
    assert parse_cc_name("sm120a") == "12.0"
    assert parse_cc_name("hopper") is None
    assert parse_cc_name("4090") is None


def test_oldest_first_and_cheapest_product(table) -> None:
    assert [a.id for a in table.archs_of("nvidia")] == ["volta", "turing", "ampere", "ada", "hopper", "blackwell"]
    assert table.smallest_gpu("ada").id == "l4"  # 24 GiB ties with rtx-4090; id order breaks the tie
    assert table.smallest_gpu("hopper").id == "h100"


@pytest.mark.parametrize(
    ("name", "arch"),
    [("h100", "hopper"), ("rtx-4090", "ada"), ("mi300x", "cdna3"), ("m3-max", "apple"), ("volta", "volta"),
     ("turing", "turing"), ("ampere", "ampere"), ("ada", "ada"), ("hopper", "hopper"), ("blackwell", "blackwell"),
     ("cdna3", "cdna3"), ("rdna3", "rdna3"), ("apple", "apple"), ("sm90", "hopper"), ("9.0", "hopper"),
     ("sm120", "blackwell-consumer"), ("sm121", "blackwell-consumer"), ("RTX 5090", "blackwell-consumer"),
     ("T4", "turing"), ("V100", "volta"), ("A100", "ampere"), ("L40S", "ada"), ("B200", "blackwell")],
)
def test_design_examples_resolve_on_shipped_data(name: str, arch: str) -> None:
    """docs/design.md's own --gpu examples must work against the shipped gpus.toml."""
    target = load_matrix().gpus.lookup(name)
    assert target.arch.id == arch
    if target.arch.vendor == "nvidia":
        assert target.cc is not None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_gpu_string_is_a_target_or_a_usage_error(table_text: str) -> None:
    table = load_matrix(TEST_MATRIX).gpus
    try:
        target = table.lookup(table_text)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert target.arch.id in table.archs


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_engine_string_is_a_request_or_a_usage_error(text: str) -> None:
    from qcheck.matrix.resolve import parse_engine_spec

    m = load_matrix(TEST_MATRIX)
    try:
        request = parse_engine_spec(text, m)
    except UsageError as exc:
        assert str(exc)
    else:
        assert request.engine.id in m.engines
