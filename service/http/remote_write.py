"""`POST /api/v1/write`: Prometheus remote_write 1.0 (a snappy-compressed protobuf `WriteRequest`).

The status codes are what Prometheus acts on: it drops a batch answered 4xx (so 400 is for bodies no
retry could mend, 401, 413, 415) and retries 5xx and, with `retry_on_http_429`, 429 (so a full intake
is a 429 with `Retry-After`, an intake that cannot take requests a 503). 204 means the intake has the
samples (`sources/remote_write.py` says what that promises).

The intake is asked for room before a body is decoded, counting the requests let in before and not
yet offered to it (`Intake.room`): under back-pressure a request that will be refused costs no
decoding (Prometheus sends it again). One let in is still refused 429 (or 503) if the room went
meanwhile, never answered 204 unless the intake took it. A body is decoded before anything is
queued, so a bad one is refused to its sender with the decoder's reason, and is also counted as a
dead letter (`prexid_dead_letters_total{reason}`) like a bad Kafka record. Decoding takes ~10-20 ms
for Prometheus's 2000 samples, so it runs in a thread of the router's own (one: requests are decoded
in the order they came, and at most one decode competes with a batch for the GIL), not on the loop
that answers the probes; the router's lifespan stops that thread when the app shuts down (uvicorn
ends the lifespan once the requests in flight are answered). A request of metadata only (Prometheus
sends those every minute) answers 204 and goes nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, Request, Response

from prexid.service.decode import remote_write
from prexid.service.decode.types import DecodeError, Samples
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.remote_write import IntakeFull, IntakeUnavailable, RemoteWriteEndpoint

log = logging.getLogger(__name__)
PATH = "/api/v1/write"
OUTCOMES = ("ok", "invalid", "unauthorized", "too_large", "unsupported", "throttled", "unavailable")


class Refused(Exception):
    """A request answered with `status` and a one-line reason (Prometheus logs the body)."""

    def __init__(self, status: int, outcome: str, text: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(text)
        self.status, self.outcome, self.text, self.headers = status, outcome, text, headers or {}


class Decoder:
    """The router's decode thread, and how many requests are let in to it (checked for room, not yet
    offered). The thread starts with the first decode and stops on `close`; a decode after that
    starts another (an app's lifespan may be run more than once, as tests do)."""

    def __init__(self) -> None:
        self.admitted = 0
        self._pool: ThreadPoolExecutor | None = None

    async def decode(self, body: bytes) -> Samples:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="remote-write-decode")
        return await asyncio.get_running_loop().run_in_executor(self._pool, remote_write.decode, body, 0.0)

    async def close(self) -> None:
        """Stop the thread once its decode (if any) is done, without blocking the loop meanwhile."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown)


def remote_write_router(endpoint: RemoteWriteEndpoint, telemetry: Telemetry) -> APIRouter:
    decoder = Decoder()

    @contextlib.asynccontextmanager
    async def lifespan(_: object) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await decoder.close()

    router = APIRouter(lifespan=lifespan)
    for outcome in OUTCOMES:
        telemetry.remote_write_requests.labels(outcome)

    @router.post(PATH, status_code=204, response_class=Response)
    async def write(request: Request) -> Response:
        """Prometheus remote_write 1.0 receiver."""
        try:
            accepted = await _accept(request, endpoint, telemetry, decoder)
        except Refused as no:
            telemetry.remote_write_requests.labels(no.outcome).inc()
            return Response(no.text + "\n", no.status, headers=no.headers, media_type="text/plain")
        telemetry.remote_write_requests.labels("ok").inc()
        telemetry.remote_write_samples.inc(accepted)
        return Response(status_code=204)

    return router


async def _accept(
    request: Request, endpoint: RemoteWriteEndpoint, telemetry: Telemetry, decoder: Decoder
) -> int:
    """The request's samples handed to the intake (how many), or `Refused` saying why not."""
    _authorise(request, endpoint)
    _check_headers(request)
    body = await _body(request, endpoint.max_body_bytes)
    with _refusals():
        endpoint.intake.room(decoder.admitted)
    decoder.admitted += 1
    try:
        samples = await decoder.decode(body)
    except DecodeError as err:
        telemetry.messages.labels("metrics").inc()
        telemetry.dead_letters.labels(err.reason).inc()
        log.warning("remote_write request refused: %s %s", err.reason, err.detail)
        raise Refused(400, "invalid", f"{err.reason}: {err.detail}") from None
    finally:
        decoder.admitted -= 1  # no await until `offer` has taken its place in the intake
    if not len(samples) and not samples.skipped:
        return 0  # metadata only
    with _refusals():
        await endpoint.intake.offer(body, samples)
    return len(samples)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The intake's refusals as answers: full is 429 (Prometheus retries after `Retry-After`),
    unavailable 503."""
    try:
        yield
    except IntakeFull as full:
        retry = {"Retry-After": str(full.retry_after_s)}
        raise Refused(429, "throttled", "intake full, retry later", retry) from None
    except IntakeUnavailable as away:
        raise Refused(503, "unavailable", str(away)) from None


def _authorise(request: Request, endpoint: RemoteWriteEndpoint) -> None:
    """With a token set, the request must carry it as a bearer token (compared in constant time)."""
    if endpoint.token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    expected = endpoint.token.get_secret_value()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise Refused(401, "unauthorized", "bearer token required", {"WWW-Authenticate": "Bearer"})


def _check_headers(request: Request) -> None:
    """Remote-write 1.0 only: a 2.0 sender falls back to 1.0 on 415 (the 2.0 spec says so)."""
    encoding = request.headers.get("content-encoding", "snappy").strip().lower()
    if encoding != "snappy":
        raise Refused(415, "unsupported", f"Content-Encoding {encoding!r}: only snappy")
    content_type = request.headers.get("content-type", "application/x-protobuf").lower()
    version = request.headers.get("x-prometheus-remote-write-version", "0.1.0").strip()
    if "io.prometheus.write.v2" in content_type or version.startswith("2"):
        raise Refused(
            415, "unsupported", "remote-write 2.0 is not supported: send 1.0 (prometheus.WriteRequest)"
        )
    if not content_type.startswith("application/x-protobuf"):
        raise Refused(415, "unsupported", f"Content-Type {content_type!r}: application/x-protobuf only")


async def _body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 once past `limit` bytes (before reading it all, if it says so)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, "too_large", f"body of {declared} bytes (limit {limit})")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, "too_large", f"body over {limit} bytes")
    return bytes(body)
