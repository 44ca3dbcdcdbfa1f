"""The supervisor's JSON (the C accelerator without the json package) is JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyard.executors.local.supervisor import dumps, loads

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
documents = st.recursive(
    scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20
)


@given(documents)
def test_it_reads_and_writes_what_the_json_module_does(value: object) -> None:
    assert loads(json.dumps(value)) == value
    assert json.loads(dumps(value)) == value
    assert loads(dumps(value)) == value


@pytest.mark.parametrize(
    "text", ["", "   ", "NaN", '{"a": Infinity}', "{", '{"a": 1} x', "[1,]", "'a'", '"\x01"']
)
def test_what_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - json.JSONDecodeError is a ValueError too
        loads(text)


def test_nan_and_objects_are_not_written() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the C encoder says "Out of range float"
        dumps({"x": float("nan")})
    with pytest.raises(TypeError):
        dumps({"x": object()})


def test_surrounding_whitespace_is_allowed() -> None:
    assert loads('  \n{"a": [1, 2.5]}\n ') == {"a": [1, 2.5]}
