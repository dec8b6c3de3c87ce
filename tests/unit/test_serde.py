"""engine/serde.py: the default serializer's round trips and its errors, and the definition checks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

import pytest

from engine import Registry, step, workflow
from engine.errors import WorkflowDefinitionError
from engine.serde import DEFAULT, JsonSerializer, Serializer, is_typed
from engine.state import canonical_json
from engine.workflow import build_spec

pytestmark = pytest.mark.unit


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Part:
    sku: str
    qty: int = 1


@dataclass(frozen=True)
class Build:
    name: str
    parts: list[Part]
    colour: Colour
    at: datetime
    due: date | None = None
    tags: tuple[str, ...] = ()
    spare: Part | None = None
    by_bin: dict[str, Part] = field(default_factory=dict)
    weight: float = 0.0


class Duck:
    """A model by duck typing: what the default serializer asks of pydantic, nothing more."""

    def __init__(self, n: int) -> None:
        self.n = n

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "json"
        return {"n": self.n}

    @classmethod
    def model_validate(cls, data: Any) -> Duck:
        if not isinstance(data, dict) or not isinstance(data.get("n"), int):
            raise ValueError("n must be an integer")
        return cls(data["n"])


BUILD = Build(
    name="b1",
    parts=[Part("bolt", 4), Part("nut")],
    colour=Colour.BLUE,
    at=datetime(2026, 3, 1, 12, 30, tzinfo=UTC),
    due=date(2026, 4, 1),
    tags=("x", "y"),
    spare=Part("washer", 2),
    by_bin={"a1": Part("pin")},
    weight=3,
)


def test_a_nested_dataclass_dumps_to_plain_json_and_loads_back_equal():
    dumped = DEFAULT.dump(BUILD)
    # Plain JSON: what the history, the API and the console show, with no type tags in it.
    assert dumped["parts"] == [{"sku": "bolt", "qty": 4}, {"sku": "nut", "qty": 1}]
    assert dumped["colour"] == "blue" and dumped["at"] == "2026-03-01T12:30:00+00:00" and dumped["due"] == "2026-04-01"
    assert dumped["tags"] == ["x", "y"] and dumped["by_bin"] == {"a1": {"sku": "pin", "qty": 1}}
    loaded = DEFAULT.load(canonical_json_roundtrip(dumped), Build)
    assert loaded == BUILD and isinstance(loaded.weight, float) and isinstance(loaded.tags, tuple)


def canonical_json_roundtrip(value: Any) -> Any:
    return json.loads(canonical_json(value))


def test_optional_fields_and_defaults_load_from_what_is_missing_or_null():
    loaded = DEFAULT.load({"name": "b", "parts": [], "colour": "red", "at": "2026-01-01T00:00:00", "due": None}, Build)
    assert loaded.due is None and loaded.spare is None and loaded.tags == () and loaded.colour is Colour.RED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"name": "b", "parts": [{"sku": 3}], "colour": "red", "at": "2026-01-01"},
            "$.parts[0].sku: expected str, got int",
        ),
        ({"name": "b", "parts": [], "colour": "green", "at": "2026-01-01"}, "$.colour: 'green' is not a Colour"),
        ({"name": "b", "parts": [], "colour": "red", "at": "soon"}, "$.at: 'soon' is not an ISO datetime"),
        ({"name": "b", "parts": [], "colour": "red"}, "$: Build needs field 'at'"),
        ({"name": "b", "parts": [], "colour": "red", "at": "2026-01-01", "extra": 1}, "$: Build has no field 'extra'"),
        ({"name": "b", "parts": {}, "colour": "red", "at": "2026-01-01"}, "$.parts: expected a list, got dict"),
        ([1], "$: expected an object for Build, got list"),
        ({"name": True, "parts": [], "colour": "red", "at": "2026-01-01"}, "$.name: expected str, got bool"),
    ],
)
def test_data_that_does_not_fit_the_type_names_the_path(data, message):
    with pytest.raises(TypeError) as err:
        DEFAULT.load(data, Build)
    assert message in str(err.value)


def test_a_bool_is_not_an_int_and_an_int_is_a_float():
    with pytest.raises(TypeError, match="expected int, got bool"):
        DEFAULT.load({"sku": "a", "qty": True}, Part)
    assert DEFAULT.load(2, float) == 2.0 and isinstance(DEFAULT.load(2, float), float)


def test_a_duck_typed_model_dumps_with_model_dump_and_loads_with_model_validate():
    assert is_typed(Duck(3)) and not is_typed(Duck) and not is_typed({"n": 3})
    assert DEFAULT.dump({"d": Duck(3)}) == {"d": {"n": 3}}
    assert DEFAULT.load({"n": 3}, Duck).n == 3
    with pytest.raises(TypeError, match=r"\$: Duck: n must be an integer"):
        DEFAULT.load({"n": "x"}, Duck)


def test_a_pydantic_model_round_trips_without_the_engine_importing_pydantic():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        sku: str
        at: datetime

    dumped = DEFAULT.dump(Item(sku="a", at=datetime(2026, 1, 1, tzinfo=UTC)))
    assert dumped == {"sku": "a", "at": "2026-01-01T00:00:00Z"}
    assert DEFAULT.load(dumped, Item) == Item(sku="a", at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(TypeError, match="Item"):
        DEFAULT.load({"sku": "a"}, Item)


@pytest.mark.parametrize("value", [{1, 2}, object(), {"k": b"bytes"}, {(3, 4): "not a JSON key"}])
def test_what_the_default_cannot_dump_is_a_type_error_naming_the_type(value):
    with pytest.raises(TypeError) as err:
        DEFAULT.dump(value)
    assert any(name in str(err.value) for name in ("set", "object", "bytes", "tuple"))


def test_keys_json_takes_are_kept_as_before():
    # json.dumps writes {1: ...} as {"1": ...}: a dict result that did so before still does.
    assert canonical_json(DEFAULT.dump({1: "a", 2: "b"})) == canonical_json({"1": "a", "2": "b"})
    assert DEFAULT.dump({Colour.RED: 1}) == {"red": 1}


@dataclass
class Totalled:
    amount: int
    doubled: int = field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.amount * 2


def test_a_field_the_constructor_does_not_take_is_dumped_and_computed_again():
    dumped = DEFAULT.dump(Totalled(4))
    assert dumped == {"amount": 4, "doubled": 8}
    assert DEFAULT.load(dumped, Totalled).doubled == 8


def test_a_serializer_is_checked_at_the_definition():
    with pytest.raises(WorkflowDefinitionError, match="dump"):
        step(lambda ctx: None, name="s", serializer=object())  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="serializer"):
        workflow("w", registry=Registry(), serializer=JsonSerializer)  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="input_type must be a type"):
        workflow("w", registry=Registry(), input_type="Order")
    assert isinstance(DEFAULT, Serializer)


class Upper(JsonSerializer):
    """A custom serializer: strings upper-cased on the way out."""

    def dump(self, value: Any) -> Any:
        dumped = super().dump(value)
        return (
            {k: v.upper() if isinstance(v, str) else v for k, v in dumped.items()}
            if isinstance(dumped, dict)
            else dumped
        )


def test_the_workflow_serializer_reaches_every_step_that_names_none():
    own = Upper()

    def a(ctx):
        return None

    spec = build_spec("w", [a, step(a, name="b", serializer=DEFAULT)], serializer=own, input_type=Part)
    assert spec.steps[0].serializer is own and spec.steps[1].serializer is DEFAULT
    assert spec.serializer is own and spec.input_type is Part
    plain = build_spec("p", [a])
    assert plain.steps[0].serializer is None and plain.serializer is DEFAULT and plain.input_type is None
    assert plain.fingerprint == build_spec("p", [a], serializer=own).fingerprint  # the shape, not the code


@dataclass(frozen=True)
class Fire:
    scheduled_at: datetime


def test_a_scheduled_workflows_input_type_must_take_what_a_fire_gives():
    def a(ctx):
        return None

    spec = build_spec("nightly", [a], schedule="rate(1 day)", input_type=Fire)
    assert (
        spec.input_type is Fire and DEFAULT.load({"scheduled_at": "2026-12-02T02:00:00Z"}, Fire).scheduled_at.hour == 2
    )
    with pytest.raises(WorkflowDefinitionError, match=r"a schedule starts it with .*needs field 'id'"):
        build_spec("nightly", [a], schedule="rate(1 day)", input_type=_NeedsId)


@dataclass(frozen=True)
class _NeedsId:
    id: str
    scheduled_at: datetime | None = None


def test_the_description_names_the_input_type_and_a_custom_serializer():
    def a(ctx):
        return None

    described = build_spec("w", [a, step(a, name="b", serializer=Upper())], input_type=Part).describe()
    assert described["input_type"] == "Part"
    assert "serializer" not in described["steps"][0] and described["steps"][1]["serializer"] == "Upper"
    assert "input_type" not in build_spec("p", [a]).describe()
