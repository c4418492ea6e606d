"""Remote-write traffic for the benches and tests: demo scrapes as the requests Prometheus would send,
and a sender that posts them as Prometheus's queue does.

Prometheus' remote_write queue shards series by their labels, each shard sending its series in time
order, at most `max_samples_per_send` (2000) samples a request. The same here: a scrape's samples
(prometheus-kafka-adapter JSON, as the demo cluster makes them) are split among `senders` by node, and
each sender's part cut into bodies of at most `max_samples` samples (remote_write 1.0: a snappy
`WriteRequest`), its bodies in scrape order. `send` posts one sender's bodies in order, one at a time,
each until answered 204, waiting `Retry-After` on a 429 (Prometheus with `retry_on_http_429`).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterable, Sequence

import cramjam
import httpx
import orjson

from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.prompb.remote_pb2 import WriteRequest
from prexid.service.decode.prompb.types_pb2 import Label, Sample, TimeSeries
from prexid.service.pipeline.series_registry import node_of

MAX_SAMPLES = 2000  # Prometheus' queue_config.max_samples_per_send
RETRY_S = 0.1  # after a 5xx or a refused connection (Prometheus: min_backoff 30 ms, doubling)
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def series_of(record: bytes) -> TimeSeries:
    """One prometheus-kafka-adapter JSON sample as a remote_write series of one sample."""
    doc = orjson.loads(record)
    labels = [Label(name="__name__", value=doc["name"])]
    labels += [Label(name=k, value=v) for k, v in sorted(doc["labels"].items())]
    ms = round(parse_rfc3339(doc["timestamp"]) * 1000)
    return TimeSeries(labels=labels, samples=[Sample(value=float(doc["value"]), timestamp=ms)])


def body_of(series: Sequence[TimeSeries]) -> bytes:
    """A remote_write 1.0 request body: the snappy block of a `WriteRequest`."""
    return bytes(cramjam.snappy.compress_raw(WriteRequest(timeseries=series).SerializeToString()))


def sender_of(record: bytes, senders: int) -> int:
    """The sender a sample goes to: by its node, so each series is sent in order by one sender."""
    return zlib.crc32(node_of(orjson.loads(record)["labels"]).encode()) % senders


def bodies(
    scrapes: Iterable[Sequence[bytes]], senders: int = 1, max_samples: int = MAX_SAMPLES
) -> list[list[bytes]]:
    """Per sender, its request bodies in scrape order (each scrape's records: adapter JSON)."""
    out: list[list[bytes]] = [[] for _ in range(senders)]
    for records in scrapes:
        parts: list[list[TimeSeries]] = [[] for _ in range(senders)]
        for record in records:
            parts[sender_of(record, senders)].append(series_of(record))
        for sent, part in zip(out, parts, strict=True):
            sent += [body_of(part[i : i + max_samples]) for i in range(0, len(part), max_samples)]
    return out


async def send(client: httpx.AsyncClient, url: str, requests: list[bytes], throttled: list[int]) -> None:
    """Post `requests` in order, each until answered 204 (a 429 waits `Retry-After`)."""
    for payload in requests:
        while True:
            try:
                resp = await client.post(url, content=payload, headers=HEADERS)
            except httpx.TransportError:
                await asyncio.sleep(RETRY_S)
                continue
            if resp.status_code == 204:
                break
            if resp.status_code == 429:
                throttled.append(1)
                await asyncio.sleep(float(resp.headers.get("retry-after", "1")))
            elif resp.status_code >= 500:
                await asyncio.sleep(RETRY_S)
            else:
                raise RuntimeError(f"remote_write answered {resp.status_code}: {resp.text[:200]}")
