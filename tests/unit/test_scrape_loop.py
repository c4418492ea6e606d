"""The scrape loop of `prexid bench scrape` and the real-broker load test: bounded, and it counts what
it was answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prexid.service.offline.bench.scrape_loop import ScrapeLoop


class Handler(BaseHTTPRequestHandler):
    """`/metrics` answered, `/api/v1/scores` refused (500): one of each per round of a client."""

    def do_GET(self) -> None:
        ok = self.path == "/metrics"
        body = b"up 1\n" if ok else b"no"
        self.send_response(200 if ok else 500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        thread.join(10)


def test_the_loop_stops_at_its_request_bound_and_counts_answers_and_failures(port: int) -> None:
    loop = ScrapeLoop(port, clients=2, limit_s=60.0, max_requests=40).start()
    loop.join(30)  # no stop(): the request bound alone ends the clients
    assert not loop.running()
    count = loop.count
    assert count.answered + count.failed == 40
    assert 16 <= count.answered <= 24  # the clients alternate the two paths
    assert count.bytes == 5 * count.answered
    assert len(count.answered_at) == count.answered
    assert count.errors and all(e == "/api/v1/scores: HTTP 500" for e in count.errors)
    assert len(count.errors) == 5  # the first few only


def test_the_loop_stops_at_its_time_bound() -> None:
    loop = ScrapeLoop(1, clients=1, limit_s=0.3, max_requests=10**9, interval_s=0.05).start()
    loop.join(30)
    assert not loop.running()
    assert loop.count.answered == 0 and loop.count.failed > 0  # port 1: refused, counted, retried
