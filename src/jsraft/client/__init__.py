"""A trio NATS client with a JetStream context (layer L4): `client = await jsraft.client.connect(url)`.

The NATS protocol is spoken through `jsraft.protocol.ClientConnection` (sans-IO); this package adds the
socket, the reader task, subscriptions, request/reply and the JetStream API (`client.jetstream()`, with
the embedded context's method names and error classes). No reconnects: a lost connection fails every
pending and later call with `ConnectionClosed`.

Modules: `connection` (`connect`, `Client`), `subscription` (`Subscription`, `Msg`), `inbox`
(request/reply), `jetstream` (`JetStreamContext`), `pull` (`PullSubscription`, `JsMsg`), `push`
(`PushSubscription`), `values`
(`PubAck`, `StreamInfo`, `RawStreamMsg`, `ConsumerInfo`),
`errors` (codes 20800–20899, and API errors mapped back to jsraft's classes).

Imports: L0–L1, L4 `protocol`, trio, attrs, stdlib (DESIGN.md §1; never `jsraft.server`).
"""

from jsraft.client.connection import Client, connect, parse_url
from jsraft.client.errors import (
    ApiError, BadResponse, ClientError, ConnectFailed, ConnectionClosed, NoResponders, RequestTimeout, SlowConsumer,
    error_from_api,
)
from jsraft.client.jetstream import JetStreamContext
from jsraft.client.pull import JsMsg, Metadata, PullSubscription
from jsraft.client.push import PushSubscription
from jsraft.client.subscription import Msg, Subscription
from jsraft.client.values import ConsumerInfo, PubAck, RawStreamMsg, SequenceInfo, StreamInfo

__all__ = [
    "ApiError", "BadResponse", "Client", "ClientError", "ConnectFailed", "ConnectionClosed", "ConsumerInfo",
    "JetStreamContext", "JsMsg", "Metadata", "Msg", "NoResponders", "PubAck", "PullSubscription", "PushSubscription", "RawStreamMsg",
    "RequestTimeout", "SequenceInfo", "SlowConsumer", "StreamInfo", "Subscription", "connect", "error_from_api",
    "parse_url",
]
