"""Start/stop the real dev Kafka broker (deploy/kafka/kafka.sh) from Python, and create topics on it.

Integration tests run against a real broker, not a mock; this wraps the same script developers use,
on free ports and a throwaway state dir, so parallel sessions and a running dev broker never clash.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnknownTopicOrPartitionError, for_code

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "deploy" / "kafka" / "kafka.sh"
_TOPIC_READY_TIMEOUT_S = 15.0
_READY_LINE = re.compile(r"^kafka (?P<version>\S+) ready: bootstrap=(?P<bootstrap>\S+)", re.MULTILINE)


class KafkaBrokerError(RuntimeError):
    """The broker did not start; the message carries the script output incl. the broker log tail."""


@dataclass(frozen=True)
class KafkaEndpoint:
    """Where the session's broker is; `version` is None for an external broker (not reported)."""

    bootstrap: str
    version: str | None


class TopicFactory(Protocol):
    """Type of the `kafka_topics` fixture: `await kafka_topics("metrics", "logs", partitions=3)`."""

    async def __call__(self, *bases: str, partitions: int = 1) -> list[str]: ...


@dataclass(frozen=True)
class KafkaBroker:
    """A broker started by :func:`start_broker`; call :meth:`stop` to kill it and drop its state."""

    bootstrap: str
    version: str
    state_dir: Path
    env: dict[str, str]

    @property
    def ports(self) -> tuple[int, int]:
        """(client, controller) ports, to restart the broker at the same address."""
        return int(self.env["KAFKA_PORT"]), int(self.env["KAFKA_CONTROLLER_PORT"])

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "server.log"

    def stop(self, *, keep_state: bool = False) -> None:
        """Stop via the script (TERM, then KILL) so no java process outlives the test session."""
        try:
            _run("stop", self.env, timeout=60)
        finally:
            if not keep_state:
                shutil.rmtree(self.state_dir, ignore_errors=True)


def free_ports(count: int) -> list[int]:
    """Ports the kernel reports free on 127.0.0.1; all bound at once so they are distinct."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


async def create_topics(bootstrap: str, names: Sequence[str], partitions: int = 1) -> None:
    """Create topics (replication 1) and wait until every partition has a leader."""
    admin = await _admin(bootstrap)
    try:
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
        )
        for name, code, *rest in response.topic_errors:
            if code:
                raise for_code(code)(f"create topic {name}: {rest[0] if rest else ''}")
        await _wait_for_leaders(admin, names)
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Delete topics; one already gone is not an error."""
    admin = await _admin(bootstrap)
    try:
        response = await admin.delete_topics(list(names))
        for name, code, *_ in response.topic_error_codes:
            if code and code != UnknownTopicOrPartitionError.errno:
                raise for_code(code)(f"delete topic {name}")
    finally:
        await admin.close()


async def _admin(bootstrap: str) -> Any:
    """A fresh admin client per call, so it works whatever event loop the caller runs in."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="prexid-tests")
    await admin.start()
    return admin


async def _wait_for_leaders(admin: Any, names: Sequence[str]) -> None:
    """Producers and group assignment misbehave on leaderless partitions; wait them out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _TOPIC_READY_TIMEOUT_S
    while True:
        topics = await admin.describe_topics(list(names))
        ready = len(topics) == len(names) and all(
            t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            for t in topics
        )
        if ready:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"topics without leaders after {_TOPIC_READY_TIMEOUT_S}s: {topics}")
        await asyncio.sleep(0.1)


def _run(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_SH), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_broker(
    state_dir: Path | None = None,
    timeout: float = 300.0,
    ports: tuple[int, int] | None = None,
    extra_env: dict[str, str] | None = None,
) -> KafkaBroker:
    """Start a broker; `timeout` covers a first-time Maven resolution of the jars.

    A restart passes the stopped broker's `state_dir` and `ports` (client, controller): same data,
    same address, so clients reconnect. `extra_env` sets the script's optional knobs (e.g. SASL).
    Raises KafkaBrokerError (with the broker log tail) instead of returning a half-started broker.
    """
    state = state_dir or Path(tempfile.mkdtemp(prefix="prexid-kafka-"))
    port, controller_port = ports or free_ports(2)
    env = {
        **os.environ,
        **(extra_env or {}),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller_port),
        "KAFKA_STATE_DIR": str(state),
    }
    try:
        proc = _run("start", env, timeout)
    except subprocess.TimeoutExpired as exc:
        _run("stop", env, timeout=60)
        raise KafkaBrokerError(f"{KAFKA_SH} start timed out after {timeout:.0f}s\n{_tail(state)}") from exc
    match = _READY_LINE.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        _run("stop", env, timeout=60)
        raise KafkaBrokerError(
            f"{KAFKA_SH} start failed (exit {proc.returncode}); state kept in {state}\n"
            f"{proc.stdout}{proc.stderr}"
        )
    return KafkaBroker(bootstrap=match["bootstrap"], version=match["version"], state_dir=state, env=env)


def _tail(state_dir: Path, lines: int = 40) -> str:
    log = state_dir / "logs" / "server.log"
    if not log.is_file():
        return f"(no broker log at {log})"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
