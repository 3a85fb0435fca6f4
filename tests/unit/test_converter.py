"""Tests for `jsraft.codec.converter`: the one strict cattrs converter behind every gateway.

Method: a small family of frozen attrs classes shaped like JetStream configs (scalars, an enum, an
optional nested class, a list of nested classes, a string list, a mapping) is structured from dicts the
way JSON arrives. Each test feeds one kind of bad input — an unknown key at the top or nested, a value
of the wrong JSON type, a missing field, a non-object — and checks the error class, its `err_code`, and
that the message names the offending field by path so a user can find it. "Strict" is taken to mean
what a JetStream server does with the same JSON: a JSON value of the wrong type is refused, not
coerced (`"false"` is not a boolean, `1.5` is not an integer, `"5"` is not a number, `5` is not a
string, a string is not an array).
"""

from __future__ import annotations

import enum

import attrs
import pytest

from jsraft.codec import structure, unstructure
from jsraft.errors import InvalidConfig, UnknownConfigField


class Retention(enum.Enum):
    limits = "limits"
    interest = "interest"
    workqueue = "workqueue"


class Discard(enum.StrEnum):
    old = "old"
    new = "new"


class Level(enum.IntEnum):
    low = 1
    high = 2


@attrs.frozen(kw_only=True)
class Placement:
    cluster: str
    tags: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class Source:
    name: str
    opt_start_seq: int = 0


@attrs.frozen(kw_only=True)
class StreamConfig:
    name: str
    subjects: list[str] = attrs.field(factory=list)
    retention: Retention = Retention.limits
    max_msgs: int = -1
    max_age_ns: int = 0
    duplicate_window_s: float = 120.0
    deny_delete: bool = False
    level: Level = Level.low
    discard: Discard = Discard.old
    placement: Placement | None = None
    sources: list[Source] = attrs.field(factory=list)
    metadata: dict[str, str] = attrs.field(factory=dict)
    mirror_names: tuple[str, ...] = ()


def _fail(data: object, error: type[Exception] = InvalidConfig) -> Exception:
    with pytest.raises(error) as caught:
        structure(data, StreamConfig, where="stream config")
    return caught.value


# --- Valid input --------------------------------------------------------------------------------


def test_structures_a_full_config() -> None:
    data = {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "workqueue",
        "max_msgs": 1000,
        "max_age_ns": 3_600_000_000_000,
        "duplicate_window_s": 2,
        "deny_delete": True,
        "level": 2,
        "discard": "new",
        "placement": {"cluster": "c1", "tags": ["ssd"]},
        "sources": [{"name": "A"}, {"name": "B", "opt_start_seq": 5}],
        "metadata": {"owner": "team"},
        "mirror_names": ["M1", "M2"],
    }
    config = structure(data, StreamConfig, where="stream config")
    assert config == StreamConfig(
        name="ORDERS",
        subjects=["orders.>"],
        retention=Retention.workqueue,
        max_msgs=1000,
        max_age_ns=3_600_000_000_000,
        duplicate_window_s=2.0,
        deny_delete=True,
        level=Level.high,
        discard=Discard.new,
        placement=Placement(cluster="c1", tags=["ssd"]),
        sources=[Source(name="A"), Source(name="B", opt_start_seq=5)],
        metadata={"owner": "team"},
        mirror_names=("M1", "M2"),
    )
    assert type(config.duplicate_window_s) is float
    assert type(config.level) is Level
    assert type(config.discard) is Discard


def test_defaults_fill_missing_optional_fields() -> None:
    assert structure({"name": "S"}, StreamConfig, where="x") == StreamConfig(name="S")
    assert structure({"name": "S", "placement": None}, StreamConfig, where="x").placement is None


def test_unstructure_round_trip() -> None:
    config = StreamConfig(
        name="S", placement=Placement(cluster="c"), sources=[Source(name="A")], retention=Retention.interest
    )
    data = unstructure(config)
    assert data["retention"] == "interest"
    assert data["placement"] == {"cluster": "c", "tags": []}
    assert structure(data, StreamConfig, where="x") == config


# --- Unknown fields ------------------------------------------------------------------------------


def test_unknown_top_level_field() -> None:
    error = _fail({"name": "S", "max_msg": 5}, UnknownConfigField)
    assert isinstance(error, InvalidConfig)
    assert error.err_code == 10052
    assert error.fields == ["max_msg"]
    assert error.where == "stream config"
    assert "max_msg" in str(error) and "stream config" in str(error)
    assert error.to_api()["err_code"] == 10052
    assert "max_msg" in error.to_api()["description"]


def test_several_unknown_fields_are_all_named() -> None:
    error = _fail({"name": "S", "zeta": 1, "alpha": 2}, UnknownConfigField)
    assert sorted(error.fields) == ["alpha", "zeta"]
    assert "alpha" in str(error) and "zeta" in str(error)


def test_unknown_field_in_a_nested_object() -> None:
    error = _fail({"name": "S", "placement": {"cluster": "c", "rack": "r1"}}, UnknownConfigField)
    assert error.err_code == 10052
    assert error.fields == ["rack"]
    assert "rack" in str(error)


def test_unknown_field_in_a_list_of_nested_objects() -> None:
    error = _fail({"name": "S", "sources": [{"name": "A"}, {"name": "B", "filter": "x"}]}, UnknownConfigField)
    assert error.fields == ["filter"]


def test_unknown_field_wins_over_other_problems() -> None:
    # An unknown field usually means a newer writer; say that, rather than a confusing type error.
    error = _fail({"name": 5, "future_option": True}, UnknownConfigField)
    assert error.fields == ["future_option"]


# --- Wrong types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_msgs", "abc"),
        ("max_msgs", "5"),  # a string is not a number, even when it looks like one
        ("max_msgs", 5.5),  # silently truncating to 5 would change the limit
        ("max_msgs", 5.0),
        ("max_msgs", True),
        ("max_msgs", None),
        ("max_msgs", [1]),
        ("duplicate_window_s", "2"),
        ("duplicate_window_s", False),
        ("deny_delete", "false"),  # bool("false") is True: exactly the bug strictness prevents
        ("deny_delete", 0),
        ("deny_delete", "yes"),
        ("name", 5),
        ("name", None),
        ("name", ["S"]),
        ("retention", "forever"),
        ("retention", 1),
        ("level", 3),
        ("level", "high"),
        ("level", True),
        ("discard", "newest"),
        ("discard", 1),
        ("subjects", "orders.>"),  # a string is iterable, but it is not a list of subjects
        ("subjects", {"orders.>": 1}),
        ("subjects", [1]),
        ("subjects", 7),
        ("placement", "c1"),
        ("placement", 5),
        ("placement", []),
        ("sources", {"name": "A"}),
        ("sources", [5]),
        ("metadata", ["a"]),
        ("metadata", {"owner": 5}),
        ("mirror_names", "M1"),
    ],
)
def test_wrong_type_is_invalid_config_naming_the_field(field: str, value: object) -> None:
    error = _fail({"name": "S", field: value} if field != "name" else {field: value})
    assert type(error) is InvalidConfig
    assert error.err_code == 10052
    assert f"stream config.{field}" in str(error), str(error)


def test_nested_wrong_type_names_the_full_path() -> None:
    error = _fail({"name": "S", "placement": {"cluster": 7}})
    assert "stream config.placement.cluster" in str(error)
    error = _fail({"name": "S", "sources": [{"name": "A"}, {"name": "B", "opt_start_seq": "x"}]})
    assert "stream config.sources[1].opt_start_seq" in str(error)
    error = _fail({"name": "S", "placement": {"cluster": "c", "tags": ["ok", 3]}})
    assert "stream config.placement.tags[1]" in str(error)


def test_every_problem_is_reported() -> None:
    error = _fail({"name": 1, "max_msgs": "x", "deny_delete": "no"})
    message = str(error)
    for field in ("name", "max_msgs", "deny_delete"):
        assert f"stream config.{field}" in message


def test_missing_required_field() -> None:
    error = _fail({})
    assert "stream config.name" in str(error)
    assert "required" in str(error)
    error = _fail({"name": "S", "placement": {}})
    assert "stream config.placement.cluster" in str(error)


def test_message_is_readable_not_a_traceback() -> None:
    message = str(_fail({"name": "S", "max_msgs": "abc"}))
    assert "Traceback" not in message
    assert "\n" not in message
    assert "int" in message


@pytest.mark.parametrize("data", [None, [], ["name", "S"], "name", 5, 1.5, True, b"{}"])
def test_non_object_input(data: object) -> None:
    error = _fail(data)
    assert type(error) is InvalidConfig
    assert "stream config" in str(error)
    assert "expected a JSON object" in str(error)


def test_attribute_converters_are_preferred() -> None:
    # A class that wants leniency asks for it with an attrs converter; the strict scalar rules only
    # apply where the class did not say how to convert.
    @attrs.frozen(kw_only=True)
    class Lenient:
        count: int = attrs.field(converter=int)

    assert structure({"count": "7"}, Lenient, where="x").count == 7
