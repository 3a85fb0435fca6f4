"""Codec (layer L1): the strict converter and the binary record framing.

Re-exports the small public surface; see `converter` and `records` for the rules.
"""

from jsraft.codec.converter import converter, structure, unstructure
from jsraft.codec.records import (
    HEADER_BYTES,
    Kind,
    RecordView,
    ScanResult,
    decode_message_body,
    encode_message,
    encode_record,
    message_digest,
    read_record,
    scan_records,
)

__all__ = [
    "HEADER_BYTES",
    "Kind",
    "RecordView",
    "ScanResult",
    "converter",
    "decode_message_body",
    "encode_message",
    "encode_record",
    "message_digest",
    "read_record",
    "scan_records",
    "structure",
    "unstructure",
]
