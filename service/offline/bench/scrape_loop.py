"""A scrape loop against a replica's read API: clients asking `/metrics` and `/api/v1/scores` in turn, as
fast as they are answered (or `interval_s` apart), each in a thread of its own (the GIL of the process
that runs them, not the replica's), bounded in time and in requests.

What `prexid bench scrape` and the real-broker load test run beside a consuming `prexid run` process,
to see whether serving the read API holds consumption back.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import orjson

PATHS = ("/metrics", "/api/v1/scores")


@dataclass
class Count:
    """What the loop's clients were answered: 200s, anything else (status or transport error), bytes."""

    answered: int = 0
    failed: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)  # the first few failures, to say what went wrong
    answered_at: list[float] = field(default_factory=list)  # monotonic time of each 200 (system-wide)


class ScrapeLoop:
    """`clients` threads, each GETting `PATHS` in turn until `stop()`, `limit_s` or `max_requests`,
    waiting `interval_s` after each answer (0: none)."""

    def __init__(
        self,
        port: int,
        clients: int = 2,
        limit_s: float = 120.0,
        max_requests: int = 100_000,
        interval_s: float = 0.0,
    ) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.interval_s = interval_s
        self.limit_s = limit_s
        self.max_requests = max_requests
        self.count = Count()
        self.last_scores = b""  # the newest `/api/v1/scores` body answered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def start(self) -> ScrapeLoop:
        for t in self._threads:
            t.start()
        return self

    def running(self) -> bool:
        """Whether any client still asks (each ends at `stop()` or a bound)."""
        return any(t.is_alive() for t in self._threads)

    def join(self, timeout_s: float) -> None:
        """Wait for the clients to end by themselves (a bound), at most `timeout_s` each."""
        for t in self._threads:
            t.join(timeout_s)

    def stop(self) -> Count:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return self.count

    def _client(self) -> None:
        deadline = time.monotonic() + self.limit_s
        with httpx.Client(base_url=self.base, timeout=10.0) as client:
            i = 0
            while not self._stop.is_set() and time.monotonic() < deadline:
                path = PATHS[i % len(PATHS)]
                i += 1
                try:
                    response = client.get(path)
                    ok, detail = response.status_code == 200, f"{path}: HTTP {response.status_code}"
                except httpx.HTTPError as err:
                    response, ok, detail = None, False, f"{path}: {err!r}"
                with self._lock:
                    c = self.count
                    if c.answered + c.failed >= self.max_requests:
                        return
                    if ok and response is not None:
                        c.answered += 1
                        c.bytes += len(response.content)
                        c.answered_at.append(time.monotonic())
                        if path == "/api/v1/scores":
                            self.last_scores = response.content
                    else:
                        c.failed += 1
                        if len(c.errors) < 5:
                            c.errors.append(detail)
                if self.interval_s:
                    self._stop.wait(self.interval_s)


def main(argv: list[str]) -> int:
    """`python -m prexid.service.offline.bench.scrape_loop PORT CLIENTS INTERVAL_S LIMIT_S MAX_REQUESTS`:
    the loop in a process of its own (so its clients take no GIL from whoever measures beside it) until
    stdin closes or a bound is reached; then its `Count` as one JSON line."""
    port, clients, interval_s, limit_s, max_requests = argv
    loop = ScrapeLoop(int(port), int(clients), float(limit_s), int(max_requests), float(interval_s))
    loop.start()
    waiter = threading.Thread(target=sys.stdin.read, daemon=True)
    waiter.start()
    while waiter.is_alive() and loop.running():
        waiter.join(0.1)
    count = loop.stop()
    print(orjson.dumps(dataclasses.asdict(count)).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
