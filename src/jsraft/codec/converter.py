"""The one strict cattrs converter (layer L1).

Owns: turning untrusted dicts (client JSON, config files, stored configs) into frozen attrs values and
back. Every gateway structures through `structure()`, so the rules are the same everywhere:

  1. Unknown keys are rejected (`forbid_extra_keys`), and the error names each unknown field.
  2. A structuring failure becomes `InvalidConfig` with one readable line per problem — never a raw
     cattrs traceback reaching a user.
  3. A JSON value of the wrong type is refused, never coerced, as a JetStream server refuses it:
     `"false"` is not a boolean (cattrs' default would make it `True`), `1.5` and `"5"` are not
     integers, `5` is not a string, a string is not an array. A class that wants leniency for a
     field says so with an attrs converter, which is preferred over these rules.

Imports: L0, attrs, cattrs.
Reference: cattrs docs, "Customizing class un/structuring" and "Validation and error messages".
"""

from __future__ import annotations

from typing import Any, TypeVar

import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from jsraft.errors import InvalidConfig, UnknownConfigField

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, prefer_attrib_converters=True)

_JSON_TYPE_NAMES = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    tuple: "array",
    dict: "object",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _strict_scalar(accepted: tuple[type, ...], expected: str) -> Any:
    """A hook that refuses JSON values of another type (rule 3); `bool` is never taken as a number."""

    def hook(value: Any, cls: type) -> Any:
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            raise ValueError(f"expected {expected}, got {_json_type(value)}")
        return cls(value)  # `cls` may be a subclass: an IntEnum or StrEnum field dispatches here too

    return hook


converter.register_structure_hook(bool, _strict_scalar((bool,), "a boolean"))
converter.register_structure_hook(int, _strict_scalar((int,), "an integer"))
converter.register_structure_hook(float, _strict_scalar((int, float), "a number"))
converter.register_structure_hook(str, _strict_scalar((str,), "a string"))


def _is_array(type_: Any) -> bool:
    """`list[X]` or `tuple[X, ...]`: the types a JSON array structures into."""
    origin = getattr(type_, "__origin__", None)
    args = getattr(type_, "__args__", ())
    return origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis)


def _strict_array_factory(type_: Any, conv: cattrs.Converter) -> Any:
    """cattrs' list/tuple hook, behind a check that the value is an array (rule 3)."""
    make = list_structure_factory if type_.__origin__ is list else homogenous_tuple_structure_factory
    base = make(type_, conv)

    def hook(value: Any, cls: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected an array, got {_json_type(value)}")
        return base(value, cls)

    return hook


converter.register_structure_hook_factory(_is_array, _strict_array_factory)


def _unknown_fields(error: BaseException) -> list[str]:
    """Collect every forbidden extra key anywhere in a (possibly nested) cattrs error group."""
    found: list[str] = []
    if isinstance(error, ForbiddenExtraKeysError):
        found.extend(sorted(error.extra_fields))
    for inner in getattr(error, "exceptions", ()):
        found.extend(_unknown_fields(inner))
    return found


def _describe(exception: BaseException, type_: Any) -> str:
    """One readable phrase for a leaf structuring error (cattrs' default drops the message)."""
    name = getattr(type_, "__name__", str(type_))
    if isinstance(exception, KeyError):
        return "required field missing"
    if isinstance(exception, ValueError) and str(exception):
        return f"invalid value for type {name}: {exception}"
    return f"invalid value for type {name}"


def structure(data: Any, cls: type[T], *, where: str) -> T:
    """Structure `data` into `cls` strictly. `where` names the input for the error message."""
    if not isinstance(data, dict):
        raise InvalidConfig(f"{where}: expected a JSON object, got {type(data).__name__}")
    try:
        return converter.structure(data, cls)
    except ForbiddenExtraKeysError as error:
        raise UnknownConfigField(sorted(error.extra_fields), where) from None
    except ClassValidationError as error:
        unknown = _unknown_fields(error)
        if unknown:
            raise UnknownConfigField(unknown, where) from None
        lines = cattrs.transform_error(error, path=where, format_exception=_describe)
        raise InvalidConfig("; ".join(lines)) from None
    except (TypeError, ValueError) as error:
        raise InvalidConfig(f"{where}: {error}") from None


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)
