"""kgtuner.validation: the one number/boolean validator every config reader uses."""

from __future__ import annotations

import math

import pytest

from kgtuner.errors import ConfigError
from kgtuner.validation import boolean, number


@pytest.mark.parametrize("value,kwargs,expected", [
    (3, {}, 3.0),
    (2.5, {}, 2.5),
    ("1e-12", {}, 1e-12),  # YAML 1.1 reads 1e-12 as a string
    (" 0.5 ", {}, 0.5),
    (3.0, {"integer": True}, 3),
    ("256", {"integer": True}, 256),
    ("1e3", {"integer": True}, 1000),
    (str(2**60 + 1), {"integer": True}, 2**60 + 1),
    (0, {"minimum": 0}, 0.0),
    (1, {"maximum": 1}, 1.0),
    (0.5, {"minimum": 0, "maximum": 1, "low_open": True, "high_open": True}, 0.5),
    (None, {"allow_none": True}, None),
    (None, {"integer": True, "minimum": 1, "allow_none": True}, None),
])
def test_number_accepts(value, kwargs, expected):
    got = number("x", value, **kwargs)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value,kwargs,message", [
    (True, {}, "a.b must be a number, got True"),
    (False, {"integer": True, "minimum": 0}, "a.b must be a whole number >= 0, got False"),
    ("abc", {}, "a.b must be a number, got 'abc'"),
    ([1], {}, "a.b must be a number, got [1]"),
    (None, {}, "a.b must be a number, got None"),
    (math.nan, {}, "a.b must be a number, got nan"),
    (math.inf, {"minimum": 0}, "a.b must be a number >= 0, got inf"),
    ("-inf", {}, "a.b must be a number, got '-inf'"),
    (2.5, {"integer": True}, "a.b must be a whole number, got 2.5"),
    ("2.5", {"integer": True}, "a.b must be a whole number, got '2.5'"),
    (-1, {"integer": True, "minimum": 0}, "a.b must be a whole number >= 0, got -1"),
    (0, {"minimum": 0, "low_open": True}, "a.b must be a number > 0, got 0"),
    (-0.1, {"minimum": 0.0, "low_open": True}, "a.b must be a number > 0, got -0.1"),
    (1.0, {"minimum": 0, "maximum": 1, "high_open": True}, "a.b must be a number >= 0 and < 1, got 1.0"),
    (2, {"maximum": 1.5}, "a.b must be a number <= 1.5, got 2"),
    ("many", {"integer": True, "minimum": 1, "allow_none": True},
     "a.b must be a whole number >= 1 or null, got 'many'"),
])
def test_number_refuses_with_one_message_shape(value, kwargs, message):
    with pytest.raises(ConfigError) as err:
        number("a.b", value, **kwargs)
    assert str(err.value) == message


def test_numpy_numbers():
    np = pytest.importorskip("numpy")
    assert number("x", np.int64(7), integer=True) == 7 and type(number("x", np.int64(7), integer=True)) is int
    assert number("x", np.float32(0.5)) == 0.5
    with pytest.raises(ConfigError):
        number("x", np.bool_(True))
    with pytest.raises(ConfigError):
        number("x", np.float64("nan"))


@pytest.mark.parametrize("value,expected", [(True, True), (False, False), ("true", True), ("False", False),
                                            (" TRUE ", True)])
def test_boolean_accepts(value, expected):
    assert boolean("flag", value) is expected


@pytest.mark.parametrize("value", ["maybe", 1, 0, None, "yes", 1.0])
def test_boolean_refuses(value):
    with pytest.raises(ConfigError, match=r"^flag must be true or false, got "):
        boolean("flag", value)


def test_boolean_none():
    assert boolean("flag", None, allow_none=True) is None
    with pytest.raises(ConfigError, match="flag must be true or false or null, got 'x'"):
        boolean("flag", "x", allow_none=True)
