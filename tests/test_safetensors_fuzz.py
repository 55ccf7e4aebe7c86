"""Hypothesis fuzzing of the safetensors header reader: mutations of valid files.

Properties: (1) any input gives a header or an InputError, never another exception; (2) whatever
qcheck accepts (with no unknown dtype), the reference library accepts too, with the same tensors:
qcheck never calls a file fine that safetensors would refuse to load. ``bench/fuzz_safetensors.py``
runs the same properties with many more examples (both from tests/support/safetensors_fuzz.py).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from support.safetensors_fuzz import check_one, mutated_files, valid_files

EXAMPLES = 300


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_files())
def test_mutations_raise_only_input_error(data):
    check_one(data)


@settings(max_examples=100, deadline=None)
@given(valid_files())
def test_valid_files_are_accepted(data):
    assert check_one(data) == "accepted"
