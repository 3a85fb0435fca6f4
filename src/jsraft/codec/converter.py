"""The one strict cattrs converter (layer L1).

Owns: turning untrusted dicts (client JSON, config files, stored configs) into frozen attrs values and
back. Every gateway structures through `structure()`, so the rules are the same everywhere:

  1. Unknown keys are rejected (`forbid_extra_keys`), and the error names each unknown field.
  2. A structuring failure becomes `InvalidConfig` with one readable line per problem — never a raw
     cattrs traceback reaching a user.

Imports: L0, attrs, cattrs.
Reference: cattrs docs, "Customizing class un/structuring" and "Validation and error messages".
"""

from __future__ import annotations

from typing import Any, TypeVar

import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from jsraft.errors import InvalidConfig, UnknownConfigField

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, prefer_attrib_converters=True)


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
