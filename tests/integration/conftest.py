"""Fixtures for integration tests against a real Kafka broker.

The broker starts lazily (only when a test asks for `kafka_bootstrap`), once per session, so
unit-only runs never pay for it. Set PREXID_KAFKA_BOOTSTRAP=host:port to use an existing broker.
A broker that cannot start fails the tests: integration tests must never silently skip.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import k8s_apiserver
from tests.integration.k8s_apiserver import ApiServer
from tests.integration.kafka_broker import (
    KafkaBrokerError,
    KafkaEndpoint,
    TopicFactory,
    create_topics,
    delete_topics,
    start_broker,
)
from tests.integration.traffic import SERVICE_TOPICS, service_topics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
import tools

BOOTSTRAP_ENV = "PREXID_KAFKA_BOOTSTRAP"

_endpoint: KafkaEndpoint | None = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "topics(partitions=1): partitions of each topic the `topics` fixture makes"
    )


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


@pytest.fixture
async def kafka_topics(kafka_bootstrap: str, request: pytest.FixtureRequest) -> AsyncIterator[TopicFactory]:
    """Factory creating per-test topics `<base>-<test>-<uuid>`; they are deleted after the test.

    Each call/teardown uses its own admin client, so it works whatever event loop the test runs in.
    """
    created: list[str] = []
    test_part = _safe(request.node.name, 60)

    async def create(*bases: str, partitions: int = 1) -> list[str]:
        names = [f"{_safe(base, 60)}-{test_part}-{uuid.uuid4().hex[:10]}" for base in bases]
        created.extend(names)  # before creating: a half-created set is deleted too
        await create_topics(kafka_bootstrap, names, partitions)
        return names

    yield create

    if created:
        await delete_topics(kafka_bootstrap, created)


@pytest.fixture
async def topics(kafka_topics: TopicFactory, request: pytest.FixtureRequest) -> dict[str, str]:
    """The topics one `prexid run` reads and writes, by role (see `traffic.service_topics`), each with
    the partitions the test's `@pytest.mark.topics(partitions=n)` asks for (default 1)."""
    marker = request.node.get_closest_marker("topics")
    partitions = int(marker.kwargs.get("partitions", 1)) if marker else 1
    return service_topics(await kafka_topics(*SERVICE_TOPICS, partitions=partitions))


@pytest.fixture
def kafka_group(request: pytest.FixtureRequest) -> str:
    """Unique consumer group id, so committed offsets never leak between tests."""
    return f"prexid-test-{_safe(request.node.name, 60)}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def k8s(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[ApiServer]:
    """A real kube-apiserver over etcd (deploy/k8s/build.sh builds both on first use, then cached)."""
    try:
        server = k8s_apiserver.start(tmp_path_factory.mktemp("k8s"))
    except k8s_apiserver.ApiServerError as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:
        pytest.fail(f"could not start kube-apiserver:\n{failure}", pytrace=False)
    _announce(pytestconfig, f"kube-apiserver at {server.url} ({server.workdir})")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary, built from the Go module proxy once by deploy/tools.py and cached."""
    try:
        return tools.helm()
    except tools.ToolError as err:
        pytest.fail(f"could not build helm: {err}")
