"""A stream's `subject_transform` and `republish`: their defaults and checks, in nats-server's words.

Owns: the defaults nats-server's `checkStreamCfg` fills in (a republish `src` left empty is `>`; a
republish from `>` to `>` on a stream whose one subject is its subject transform's source becomes the
implicit republish of the transformed subjects, `src` and `dest` both the transform's `dest`), and the
checks, with their codes: an invalid transform source (10155), an invalid transform destination
(10156, nats-server's `ValidateMapping`), a republish destination overlapping the stream's subjects
("forms a cycle", 10052) and a republish transform that does not compile (10052).

Invariants:
  1. `with_transform_defaults` is idempotent: a config it returned comes back unchanged.
  2. `validate_transforms` raises a `BadRequest` subclass with nats-server's code and words, or returns;
     it reads only the config.

Imports: L0 (`errors`), L1 (`subjects`, `jsapi.subject_transform`), attrs. Reference: nats-server
`server/stream.go` (`checkStreamCfg`), `server/errors.json` (10155, 10156).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from jsraft import subjects as subjectlib
from jsraft.errors import BadRequest, InvalidConfig
from jsraft.jsapi.subject_transform import TransformError, compile_transform, validate_mapping

if TYPE_CHECKING:
    from jsraft.jsapi.stream_config import StreamConfig


class StreamTransformInvalidSource(BadRequest):
    """JSStreamTransformInvalidSource: the subject transform's `src` is not a valid subject."""

    err_code = 10155
    default_description = "stream transform source"


class StreamTransformInvalidDestination(BadRequest):
    """JSStreamTransformInvalidDestination: the subject transform's `dest` is not a valid mapping."""

    err_code = 10156
    default_description = "stream transform"


def with_transform_defaults(config: "StreamConfig") -> dict[str, Any]:
    """The changes nats-server's defaults make to `republish` and `subject_transform` (invariant 1)."""
    changes: dict[str, Any] = {}
    transform = config.subject_transform
    if transform is not None and transform.src is None:
        transform = changes["subject_transform"] = attrs.evolve(transform, src="")
    republish = config.republish
    if republish is None:
        return changes
    if not republish.src:
        republish = attrs.evolve(republish, src=">")
    if (republish.src == ">" and republish.dest == ">" and transform is not None and len(config.subjects) == 1
            and transform.src == config.subjects[0]):
        republish = attrs.evolve(republish, src=transform.dest, dest=transform.dest)
    if republish != config.republish:
        changes["republish"] = republish
    return changes


def validate_transforms(config: "StreamConfig") -> None:
    """nats-server's checks of both, in its order and words (invariant 2)."""
    transform = config.subject_transform
    if transform is not None:
        if transform.src and not subjectlib.is_valid(transform.src, wildcards=True):
            raise StreamTransformInvalidSource(f"stream transform source: invalid subject {transform.src}")
        try:
            validate_mapping(transform.src or "", transform.dest)
        except TransformError as error:
            raise StreamTransformInvalidDestination(f"stream transform: {error}") from None
    republish = config.republish
    if republish is None:
        return
    if republish.dest and any(_collide(republish.dest, subject) for subject in config.subjects):
        raise InvalidConfig("stream configuration for republish destination forms a cycle")
    try:
        compile_transform(republish.src or ">", republish.dest)
    except TransformError:
        raise InvalidConfig(f"stream configuration for republish with transform from '{republish.src}' "
                            f"to '{republish.dest}' not valid") from None



def _collide(a: str, b: str) -> bool:
    """nats-server's `SubjectsCollide`: some subject matches both (an invalid one collides with nothing)."""
    if not subjectlib.is_valid(a, wildcards=True) or not subjectlib.is_valid(b, wildcards=True):
        return False
    return subjectlib.overlaps(a, b)
