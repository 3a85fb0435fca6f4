"""Every bound jsraft enforces, in one place (layer L0).

Owns: the `*_max` / `*_min` constants. A limit lives here, with a comment saying why it has its value,
so that no queue, buffer, batch, loop or retry anywhere is unbounded (TigerBeetle: put a limit on
everything). Code compares against these names; tests import them rather than repeating numbers.

Imports: nothing.
"""

from __future__ import annotations

# Subjects: nats-server accepts long subjects, but the store frames the subject length in a u16.
subject_bytes_max = 4096
# A message header block is framed with a u32 in records; cap it well below that to bound memory.
headers_bytes_max = 1 << 20
# NATS' default max_payload is 1 MiB; jsraft allows up to 8 MiB if configured (nats-server: 64 MiB
# hard cap). A record body must stay far below the u32 record-length field.
payload_bytes_max = 8 << 20
payload_bytes_default = 1 << 20
# A record (header + body) must fit in a u32 length and in one block.
record_bytes_max = subject_bytes_max + headers_bytes_max + payload_bytes_max + 64

# FileStore blocks: a few MiB keeps a rewrite (erase, compression) cheap and recovery granular.
block_bytes_default = 4 << 20
block_bytes_min = 64 << 10
block_bytes_max = 64 << 20
# Bounded read cache of whole decoded blocks: bodies must not live in memory for long.
block_cache_blocks_max = 4

# When a record header is damaged the scanner searches forward byte by byte for the next record
# whose CRC is valid. A candidate must claim a length no larger than this to be checked.
resync_candidate_bytes_max = record_bytes_max

# Stream names: nats-server rejects names with whitespace, '.', '*', '>', path separators.
stream_name_bytes_max = 255

# NATS client connections (protocol, server.client_conn), nats-server's defaults: a control line (the
# arguments of one operation) of 4096 bytes (MAX_CONTROL_LINE_SIZE); 64 MiB of outbound bytes queued per
# client before it is a slow consumer (MAX_PENDING_SIZE); 64 Ki connections (DEFAULT_MAX_CONNECTIONS).
# nats-server has no default cap on subscriptions per connection; 1 Mi keeps one client's sublist bounded.
control_line_bytes_max = 4096
client_pending_bytes_default = 64 << 20
client_connections_max = 64 << 10
client_subscriptions_max = 1 << 20
