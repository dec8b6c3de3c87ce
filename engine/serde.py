"""Typed values in and out of the stored JSON: the serializer hook of steps and workflows.

What is stored is always plain JSON (the history, the API and the console read it as it is);
a type is named where a value is read back (``ctx.get(name, Order)``), never stored beside it.
The default serializer handles JSON values, dataclasses (loaded through their type hints:
nested dataclasses, lists, dicts, tuples, Optional/unions, datetime/date as ISO strings,
Enums) and pydantic-style models by duck typing (``model_dump(mode="json")`` and
``model_validate``), so the engine never imports pydantic.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import date, datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from engine.errors import WorkflowDefinitionError

JSON_SCALARS = (str, int, float, bool, type(None))


@runtime_checkable
class Serializer(Protocol):
    """``dump(value)`` returns a JSON value (raise TypeError for what it cannot dump);
    ``load(data, type)`` builds a ``type`` from it (raise TypeError or ValueError when it does not fit)."""

    def dump(self, value: Any) -> Any: ...

    def load(self, data: Any, type_: Any) -> Any: ...


def is_typed(value: Any) -> bool:
    """A dataclass instance or a model (``model_dump``): a value that is one object, not a mapping."""
    if isinstance(value, type):
        return False
    return dataclasses.is_dataclass(value) or callable(getattr(value, "model_dump", None))


class JsonSerializer:
    """The default: JSON values as they are, dataclasses and models dumped to JSON objects."""

    def dump(self, value: Any) -> Any:
        if isinstance(value, Enum):
            return self.dump(value.value)
        if isinstance(value, JSON_SCALARS):
            return value
        if isinstance(value, (datetime, date)):
            return value.isoformat()
        if isinstance(value, dict):
            return {self._key(k): self.dump(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.dump(v) for v in value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: self.dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump):
            return model_dump(mode="json")
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def _key(self, key: Any) -> Any:
        # The keys json.dumps takes (it writes a number's or None's as a string), as before a serializer.
        if isinstance(key, Enum):
            key = key.value
        if not isinstance(key, JSON_SCALARS):
            raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
        return key

    def load(self, data: Any, type_: Any) -> Any:
        return _load(data, type_, "$")


def _load(data: Any, tp: Any, where: str) -> Any:
    """``data`` as ``tp``; TypeError naming the path (``$.items[2].sku``) of what does not fit."""
    if tp is Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _load_union(data, typing.get_args(tp), where)
    if origin is typing.Literal:
        if data not in typing.get_args(tp):
            raise TypeError(f"{where}: {data!r} is not one of {typing.get_args(tp)}")
        return data
    if origin in (list, tuple, dict) or tp in (list, tuple, dict):
        return _load_container(data, tp, origin or tp, where)
    if isinstance(tp, type):
        return _load_class(data, tp, where)
    raise TypeError(f"{where}: cannot load into {tp!r}")


def _load_union(data: Any, options: tuple[Any, ...], where: str) -> Any:
    if data is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _load(data, option, where)
        except (TypeError, ValueError) as exc:
            errors.append(str(exc))
    raise TypeError(errors[0] if len(errors) == 1 else f"{where}: fits none of {options}: {'; '.join(errors)}")


def _load_container(data: Any, tp: Any, origin: Any, where: str) -> Any:
    args = typing.get_args(tp)
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"{where}: expected an object, got {type(data).__name__}")
        value_type = args[1] if len(args) == 2 else Any
        return {k: _load(v, value_type, f"{where}.{k}") for k, v in data.items()}
    if not isinstance(data, list):
        raise TypeError(f"{where}: expected a list, got {type(data).__name__}")
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(data):
            raise TypeError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(_load(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(data, args, strict=True)))
    item_type = args[0] if args else Any
    items = [_load(v, item_type, f"{where}[{i}]") for i, v in enumerate(data)]
    return tuple(items) if origin is tuple else items


def _load_class(data: Any, tp: type, where: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return _load_dataclass(data, tp, where)
    validate = getattr(tp, "model_validate", None)
    if callable(validate):
        try:
            return validate(data)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: {tp.__name__}: {exc}") from None
    if issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError:
            raise TypeError(f"{where}: {data!r} is not a {tp.__name__}") from None
    if tp is datetime or tp is date:
        if not isinstance(data, str):
            raise TypeError(f"{where}: expected an ISO {tp.__name__} string, got {type(data).__name__}")
        try:
            return tp.fromisoformat(data)
        except ValueError:
            raise TypeError(f"{where}: {data!r} is not an ISO {tp.__name__}") from None
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if tp in JSON_SCALARS and (not isinstance(data, tp) or (tp is int and isinstance(data, bool))):
        raise TypeError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
    if tp in JSON_SCALARS:
        return data
    raise TypeError(f"{where}: cannot load into {tp.__name__}")


def _load_dataclass(data: Any, tp: type, where: str) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"{where}: expected an object for {tp.__name__}, got {type(data).__name__}")
    try:
        hints = typing.get_type_hints(tp)
    except NameError as exc:  # an annotation naming a type its module cannot see (a class local to a function)
        raise TypeError(f"{where}: the type hints of {tp.__name__} do not resolve: {exc}") from None
    every = {f.name: f for f in dataclasses.fields(tp)}
    unknown = sorted(set(data) - set(every))
    if unknown:
        raise TypeError(f"{where}: {tp.__name__} has no field {unknown[0]!r}")
    values = {}
    # A field the constructor does not take (init=False) is dumped but computed again, not loaded.
    for name, f in ((n, f) for n, f in every.items() if f.init):
        if name in data:
            values[name] = _load(data[name], hints.get(name, Any), f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TypeError(f"{where}: {tp.__name__} needs field {name!r}")
    return tp(**values)


#: The serializer of every step and workflow that names none.
DEFAULT = JsonSerializer()


def check_serializer(value: object, what: str) -> Serializer | None:
    """Checked at the definition: a serializer without dump/load would fail only at the first commit."""
    if value is None:
        return None
    if isinstance(value, type) or not isinstance(value, Serializer):
        raise WorkflowDefinitionError(
            f"{what}: serializer {value!r} must be an object with dump(value) and load(data, type)"
        )
    return value


def check_input_type(value: object, what: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, type) and typing.get_origin(value) is None:
        raise WorkflowDefinitionError(f"{what}: input_type must be a type (a dataclass or a model), not {value!r}")
    return value
