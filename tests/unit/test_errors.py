"""Tests for `jsraft.errors`: stable codes, the API error shape, and `invariant()`.

Method: the expected `(err_code, http_code)` of every error class is written out here as a table, by
hand, from nats-server's `server/errors.json` for the conditions JetStream defines (`error_code` and
`code` of JSBadRequestErr, JSInvalidJSONErr, JSStreamInvalidConfigF, JSStreamMessageExceedsMaximumErr,
JSStreamNotFoundErr, JSNoMessageFoundErr, JSStreamStoreFailedF, JSStreamMsgDeleteFailedF) and from
jsraft's own 2xxxx range for the rest. A change to any code fails here, which is the point: a released
code never changes. Uniqueness is checked over every class that declares its own code; the classes
that deliberately share their parent's code are listed. `invariant()` is run in a `python -O`
subprocess to show it survives the flag that strips `assert`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from jsraft import errors
from jsraft.errors import (
    BadFileFormat,
    BadRequest,
    CorruptRecord,
    DamagedSequence,
    InvalidConfig,
    InvalidJSON,
    InvalidSubject,
    InvariantViolation,
    JsraftError,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MessageTooLarge,
    MsgDeleteFailed,
    NoMessageFound,
    SequenceOutOfOrder,
    StoreClosed,
    StoreLocked,
    StoreFailed,
    StreamNotFound,
    UnknownConfigField,
    invariant,
)

# class -> (err_code, http_code). JetStream's numbers first (from server/errors.json), then jsraft's.
EXPECTED: dict[type[JsraftError], tuple[int, int]] = {
    BadRequest: (10003, 400),  # JSBadRequestErr
    InvalidJSON: (10025, 400),  # JSInvalidJSONErr
    InvalidConfig: (10052, 500),  # JSStreamInvalidConfigF (nats-server answers it with code 500)
    MessageTooLarge: (10054, 400),  # JSStreamMessageExceedsMaximumErr
    StreamNotFound: (10059, 404),  # JSStreamNotFoundErr
    NoMessageFound: (10037, 404),  # JSNoMessageFoundErr
    StoreFailed: (10077, 503),  # JSStreamStoreFailedF
    MsgDeleteFailed: (10057, 500),  # JSStreamMsgDeleteFailedF
    JsraftError: (20000, 500),
    InvalidSubject: (20001, 400),
    SequenceOutOfOrder: (20002, 400),
    CorruptRecord: (20010, 500),
    DamagedSequence: (20011, 500),
    BadFileFormat: (20012, 500),
    StoreLocked: (20020, 500),
}

# Classes that share their parent's code on purpose: nats-server reports these conditions with the
# parent's code and a more specific description.
SHARES_PARENT_CODE: dict[type[JsraftError], type[JsraftError]] = {
    UnknownConfigField: InvalidConfig,
    MaxMsgsExceeded: StoreFailed,
    MaxBytesExceeded: StoreFailed,
    MaxMsgsPerSubjectExceeded: StoreFailed,
    StoreClosed: StoreFailed,
}


def _all_error_classes() -> set[type[JsraftError]]:
    found: set[type[JsraftError]] = set()
    pending: list[type[JsraftError]] = [JsraftError]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    # Only the module's own classes: tests elsewhere may define subclasses.
    return {cls for cls in found if cls.__module__ == errors.__name__}


def test_every_error_class_is_accounted_for() -> None:
    assert _all_error_classes() == set(EXPECTED) | set(SHARES_PARENT_CODE)


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda cls: cls.__name__)
def test_codes_are_stable(cls: type[JsraftError]) -> None:
    assert (cls.err_code, cls.http_code) == EXPECTED[cls]
    assert "err_code" in vars(cls), f"{cls.__name__} must declare its own err_code"


@pytest.mark.parametrize("cls", list(SHARES_PARENT_CODE), ids=lambda cls: cls.__name__)
def test_specialised_errors_share_their_parents_code(cls: type[JsraftError]) -> None:
    parent = SHARES_PARENT_CODE[cls]
    assert issubclass(cls, parent)
    assert "err_code" not in vars(cls)
    assert (cls.err_code, cls.http_code) == (parent.err_code, parent.http_code)


def test_declared_codes_are_unique() -> None:
    declared = [cls.err_code for cls in _all_error_classes() if "err_code" in vars(cls)]
    assert len(declared) == len(set(declared))


def test_code_ranges() -> None:
    for cls in _all_error_classes():
        assert 10000 <= cls.err_code < 30000
        assert cls.http_code in (400, 404, 500, 503)
    # jsraft's own conditions use 2xxxx, never a JetStream number.
    own = (JsraftError, InvalidSubject, SequenceOutOfOrder, CorruptRecord, DamagedSequence, BadFileFormat)
    for cls in own:
        assert cls.err_code >= 20000


def test_hierarchy() -> None:
    assert issubclass(InvalidConfig, BadRequest)
    assert issubclass(InvalidJSON, BadRequest)
    assert issubclass(UnknownConfigField, InvalidConfig)
    assert issubclass(DamagedSequence, CorruptRecord)
    assert issubclass(BadFileFormat, CorruptRecord)
    for cls in _all_error_classes():
        assert issubclass(cls, Exception)
    # A bug is not an operating error: `except JsraftError` must never swallow one.
    assert not issubclass(InvariantViolation, JsraftError)
    assert issubclass(InvariantViolation, AssertionError)


# --- to_api ------------------------------------------------------------------------------------


def test_to_api_shape_with_default_description() -> None:
    assert StreamNotFound().to_api() == {"code": 404, "err_code": 10059, "description": "stream not found"}
    assert BadRequest().to_api() == {"code": 400, "err_code": 10003, "description": "bad request"}


def test_to_api_with_a_specific_description() -> None:
    error = StoreFailed("disk full")
    assert error.description == "disk full"
    assert str(error) == "disk full"
    assert error.to_api() == {"code": 503, "err_code": 10077, "description": "disk full"}
    assert MaxMsgsExceeded().to_api() == {
        "code": 503,
        "err_code": 10077,
        "description": "maximum messages exceeded",
    }


@pytest.mark.parametrize("cls", [c for c in EXPECTED if c not in (SequenceOutOfOrder, DamagedSequence)])
def test_every_simple_error_builds_its_api_object(cls: type[JsraftError]) -> None:
    api = cls().to_api()
    assert set(api) == {"code", "err_code", "description"}
    assert api["code"] == cls.http_code and api["err_code"] == cls.err_code
    assert isinstance(api["description"], str) and api["description"]


def test_errors_with_structured_arguments() -> None:
    error = SequenceOutOfOrder(expected=5, got=7)
    assert (error.expected, error.got) == (5, 7)
    assert error.to_api() == {
        "code": 400,
        "err_code": 20002,
        "description": "sequence out of order: expected 5, got 7",
    }

    damaged = DamagedSequence(41, "crc")
    assert (damaged.seq, damaged.kind) == (41, "crc")
    assert damaged.err_code == 20011
    assert "41" in damaged.description and "crc" in damaged.description

    unknown = UnknownConfigField(["zeta", "alpha"], "consumer config")
    assert unknown.fields == ["zeta", "alpha"]
    assert unknown.where == "consumer config"
    assert unknown.to_api() == {
        "code": 500,
        "err_code": 10052,
        "description": "unknown field(s) in consumer config: alpha, zeta",
    }


def test_empty_description_is_kept() -> None:
    assert StoreFailed("").description == ""


# --- invariant ---------------------------------------------------------------------------------


def test_invariant_passes_and_fails() -> None:
    invariant(True, "never raised")
    invariant(1, "truthy values pass")
    with pytest.raises(InvariantViolation, match="commit index moved back"):
        invariant(False, "commit index moved back")
    with pytest.raises(InvariantViolation):
        invariant(0, "falsy values fail")
    with pytest.raises(InvariantViolation):
        invariant([], "empty containers fail")


def test_invariant_survives_python_dash_o() -> None:
    program = textwrap.dedent(
        """
        import sys
        from jsraft.errors import InvariantViolation, invariant
        assert False, "stripped by -O"  # proves the flag is in effect
        try:
            invariant(False, "still checked")
        except InvariantViolation as error:
            print("raised:", error)
            sys.exit(0)
        sys.exit(3)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-O", "-c", program], capture_output=True, text=True, timeout=30, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "raised: still checked" in completed.stdout


def _package_error_classes():
    """Every JsraftError subclass defined anywhere in the package (modules imported by walking it)."""
    import importlib
    import pkgutil

    import jsraft
    from jsraft.errors import JsraftError

    for module in pkgutil.walk_packages(jsraft.__path__, "jsraft."):
        if ".testing" in module.name or module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    seen, pending = [], [JsraftError]
    while pending:
        cls = pending.pop()
        seen.append(cls)
        pending.extend(cls.__subclasses__())
    return seen


def test_jsraft_codes_are_unique_across_the_whole_package():
    """Codes from 20000 up are jsraft's own: two unrelated classes must never share one.

    (A subclass may keep its parent's code — e.g. MaxMsgsExceeded is a StoreFailed, 10077 — and
    JetStream codes below 20000 follow nats-server, which reuses some on purpose.)
    """
    owners: dict[int, type] = {}
    for cls in _package_error_classes():
        code = cls.err_code
        if code < 20000:
            continue
        owner = owners.get(code)
        if owner is None or issubclass(owner, cls):
            owners[code] = cls
            continue
        assert issubclass(cls, owner), f"err_code {code} used by {owner.__module__}.{owner.__name__} and {cls.__module__}.{cls.__name__}"
