"""Fixtures for integration tests against a real Kafka broker.

The broker starts lazily (only when a test asks for `kafka_bootstrap`), once per session, so
unit-only runs never pay for it. Set PREXID_KAFKA_BOOTSTRAP=host:port to use an existing broker.
A broker that cannot start fails the tests: integration tests must never silently skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnknownTopicOrPartitionError, for_code

from tests.integration.kafka_broker import KafkaBrokerError, KafkaEndpoint, TopicFactory, start_broker

BOOTSTRAP_ENV = "PREXID_KAFKA_BOOTSTRAP"
_TOPIC_READY_TIMEOUT_S = 15.0

_endpoint: KafkaEndpoint | None = None


def _announce(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:  # e.g. xdist workers: no terminal, fall back to stdout
        print(line)
        return
    capman: Any = config.pluginmanager.get_plugin("capturemanager")
    # Fixture setup runs with output captured; lift it so the line reaches the terminal now.
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        reporter.ensure_newline()
        reporter.write_line(line, bold=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeat the broker line at the end so the version is in every integration test log."""
    if _endpoint is not None:
        terminalreporter.write_sep("-", _describe(_endpoint))


def _describe(endpoint: KafkaEndpoint) -> str:
    version = endpoint.version or "external (version not reported)"
    return f"kafka broker: {version} at {endpoint.bootstrap}"


@pytest.fixture(scope="session")
def kafka_endpoint(pytestconfig: pytest.Config) -> Iterator[KafkaEndpoint]:
    """The session's broker: $PREXID_KAFKA_BOOTSTRAP, or a fresh one from deploy/kafka/kafka.sh."""
    global _endpoint
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        _endpoint = KafkaEndpoint(bootstrap=external, version=None)
        _announce(pytestconfig, _describe(_endpoint))
        yield _endpoint
        return
    try:
        broker = start_broker()
    except KafkaBrokerError as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:  # outside `except` so pytest shows the log tail once, not a chained traceback
        pytest.fail(f"could not start the Kafka broker:\n{failure}", pytrace=False)
    try:
        _endpoint = KafkaEndpoint(bootstrap=broker.bootstrap, version=broker.version)
        _announce(pytestconfig, f"{_describe(_endpoint)} (state {broker.state_dir})")
        yield _endpoint
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_endpoint: KafkaEndpoint) -> str:
    """Bootstrap servers string, e.g. "127.0.0.1:41234"."""
    return kafka_endpoint.bootstrap


def _safe(text: str, limit: int) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:limit]


async def _admin(bootstrap: str) -> Any:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="prexid-tests")
    await admin.start()
    return admin


@pytest.fixture
async def kafka_topics(kafka_bootstrap: str, request: pytest.FixtureRequest) -> AsyncIterator[TopicFactory]:
    """Factory creating per-test topics `<base>-<test>-<uuid>`; they are deleted after the test.

    Each call/teardown uses its own admin client, so it works whatever event loop the test runs in.
    """
    created: list[str] = []
    test_part = _safe(request.node.name, 60)

    async def create(*bases: str, partitions: int = 1) -> list[str]:
        names = [f"{_safe(base, 60)}-{test_part}-{uuid.uuid4().hex[:10]}" for base in bases]
        admin = await _admin(kafka_bootstrap)
        try:
            response = await admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
            )
            for name, code, *rest in response.topic_errors:
                if code:
                    raise for_code(code)(f"create topic {name}: {rest[0] if rest else ''}")
            created.extend(names)
            await _wait_for_leaders(admin, names)
        finally:
            await admin.close()
        return names

    yield create

    if created:
        admin = await _admin(kafka_bootstrap)
        try:
            response = await admin.delete_topics(created)
            for name, code, *_ in response.topic_error_codes:
                if code and code != UnknownTopicOrPartitionError.errno:
                    raise for_code(code)(f"delete topic {name}")
        finally:
            await admin.close()


async def _wait_for_leaders(admin: Any, names: list[str]) -> None:
    """Producers and group assignment misbehave on leaderless partitions; wait them out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _TOPIC_READY_TIMEOUT_S
    while True:
        topics = await admin.describe_topics(names)
        ready = len(topics) == len(names) and all(
            t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            for t in topics
        )
        if ready:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"topics without leaders after {_TOPIC_READY_TIMEOUT_S}s: {topics}")
        await asyncio.sleep(0.1)


@pytest.fixture
def kafka_group(request: pytest.FixtureRequest) -> str:
    """Unique consumer group id, so committed offsets never leak between tests."""
    return f"prexid-test-{_safe(request.node.name, 60)}-{uuid.uuid4().hex[:10]}"
