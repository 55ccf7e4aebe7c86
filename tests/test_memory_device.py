"""GPU memory as the driver reports it (matrices/gpus.toml capacity and [capacity]): what each figure is, how a missing
one is estimated (always on the side that cannot make a model "fit" that does not), and the data's validation."""

from __future__ import annotations

import pytest

from qcheck.matrix import load_matrix
from qcheck.matrix.gpu_capacity import parse_capacity, parse_rules
from qcheck.matrix.schema import MatrixDataError, Where
from qcheck.memory import GIB, MIB
from qcheck.memory.device import device_memory


@pytest.fixture(scope="module")
def gpus():  # type: ignore[no-untyped-def]
    return load_matrix().gpus


def test_a_product_with_driver_figures(gpus) -> None:  # type: ignore[no-untyped-def]
    h100 = device_memory(gpus, "h100", "nvidia", "GPU")
    assert h100.basis == "driver" and h100.total_bytes == int(79.19 * GIB) and h100.smi_bytes == 81559 * MIB
    assert h100.text == "79.19 GiB as the driver reports a h100 (81,559 MiB in nvidia-smi)"
    assert h100.datasheet_gib == 80


def test_ecc_parts_are_estimated_from_nvidia_smi_less_the_largest_gap(gpus) -> None:  # type: ignore[no-untyped-def]
    """An L40S is sold as 48 GB; nvidia-smi shows 46,068 MiB (ECC takes a sixteenth); the runtime total is estimated
    768 MiB below that, the largest gap measured (A100 80GB)."""
    l40s = device_memory(gpus, "l40s", "nvidia", "GPU")
    rules = gpus.capacity_rules
    assert l40s.basis == "estimate" and l40s.total_bytes == int((46068 - rules.smi_gap_max_mib) * MIB)
    assert l40s.total_bytes < 45 * GIB < 48 * GIB and "an estimate" in l40s.text


def test_a_product_without_figures_takes_the_smallest_datasheet_ratio(gpus) -> None:  # type: ignore[no-untyped-def]
    h200 = device_memory(gpus, "h200", "nvidia", "GPU")
    rules = gpus.capacity_rules
    assert h200.basis == "estimate" and h200.total_bytes == int(141 * rules.datasheet_ratio * GIB)
    # nvidia-smi's figure (SGLang's heuristic) is the runtime total plus the smallest gap: a smaller fraction
    assert h200.smi_bytes == int(h200.total_bytes + rules.smi_gap_min_mib * MIB)


def test_measured_free_memory_is_kept_beside_the_total(gpus) -> None:  # type: ignore[no-untyped-def]
    busy = device_memory(gpus, "rtx-4090", "nvidia", "GPU", measured_gib=10.0)
    assert busy.total_bytes == int(23.65 * GIB) and busy.free_bytes == 10 * GIB and "measured" in busy.text
    unknown = device_memory(gpus, None, "nvidia", "GPU", measured_gib=12.0)
    assert unknown.total_bytes == 12 * GIB and unknown.basis == "measured"


def test_every_shipped_capacity_names_its_page_and_is_below_the_datasheet(gpus) -> None:  # type: ignore[no-untyped-def]
    with_cap = [g for g in gpus.gpus.values() if g.capacity is not None]
    assert len(with_cap) >= 12
    for g in with_cap:
        assert "https://" in g.capacity.source, g.id
        if g.capacity.runtime_total_gib is not None:
            assert g.capacity.runtime_total_gib < (g.memory_gib or 0), g.id
        if g.capacity.smi_total_mib is not None:
            assert g.capacity.smi_total_mib <= (g.memory_gib or 0) * 1024, g.id


@pytest.mark.parametrize(("raw", "check"), [
    ({"source": "https://x"}, "missing-key"),
    ({"runtime_total_gib": -1, "source": "https://x"}, "bad-type"),
    ({"runtime_total_gib": float("nan"), "source": "https://x"}, "bad-type"),
    ({"smi_total_mib": 1000, "source": "a datasheet"}, "missing-source"),
    ({"smi_total_mib": 1000, "source": "https://x", "ecc": True}, "unknown-key"),
])
def test_capacity_entries_are_validated(raw: dict, check: str) -> None:
    with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
        parse_capacity(raw, Where("gpus.toml", "gpu #1"))


def test_capacity_rules_are_validated() -> None:
    ok = parse_rules({"smi_gap_min_mib": 300, "smi_gap_max_mib": 800, "datasheet_ratio": 0.97, "source": "s"}, "f")
    assert ok.smi_gap_max_mib == 800
    for bad in ({"smi_gap_min_mib": 900, "smi_gap_max_mib": 800, "datasheet_ratio": 0.97, "source": "s"},
                {"smi_gap_min_mib": 300, "smi_gap_max_mib": 800, "datasheet_ratio": 1.2, "source": "s"}):
        with pytest.raises(MatrixDataError, match=r"\[bad-value\]"):
            parse_rules(bad, "f")
