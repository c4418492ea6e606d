"""prexid talks to a broker that demands SASL/SCRAM-SHA-512, and never shows the password."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator

import pytest

from prexid.service.app.settings import KafkaSecurity, Settings
from prexid.service.app.wiring import build
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.kafka_broker import KafkaBroker, KafkaBrokerError, free_ports, start_broker
from tests.integration.traffic import (
    Replica,
    alert_docs,
    create_service_topics,
    has_xid,
    produce,
    read_until,
    settings_for,
)

pytestmark = pytest.mark.integration

PASSWORD = "pw-" + secrets.token_hex(12)
INCIDENT = DemoCluster(nodes=2, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


@pytest.fixture(scope="module")
def scram_broker() -> Iterator[tuple[KafkaBroker, str]]:
    """A broker with a second, SCRAM-only listener and one SCRAM user, `prexid`."""
    [sasl_port] = free_ports(1)
    knobs = {"KAFKA_SASL_PORT": str(sasl_port), "KAFKA_SCRAM_USERS": f"prexid={PASSWORD}"}
    try:
        broker = start_broker(extra_env=knobs)
    except KafkaBrokerError as exc:
        pytest.fail(f"could not start the SASL broker:\n{exc}", pytrace=False)
    yield broker, f"127.0.0.1:{sasl_port}"
    broker.stop()


def scram_settings(base: Settings, sasl_bootstrap: str, password: str) -> Settings:
    security = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_username="prexid", sasl_password=password)
    return base.model_copy(update={"kafka_bootstrap": sasl_bootstrap, "kafka_security": security})


async def test_prexid_runs_over_scram_and_never_logs_the_password(
    scram_broker: tuple[KafkaBroker, str], caplog: pytest.LogCaptureFixture
) -> None:
    broker, sasl_bootstrap = scram_broker
    topics = await create_service_topics(broker.bootstrap, partitions=2)
    await produce(broker.bootstrap, topics["metrics"], topics["logs"], simulate(INCIDENT))
    settings = scram_settings(settings_for(broker.bootstrap, topics, "scram"), sasl_bootstrap, PASSWORD)
    caplog.set_level(logging.DEBUG)
    replica = Replica(settings)
    try:
        await replica.assigned()
        records = await read_until(broker.bootstrap, topics["alerts"], has_xid)
    finally:
        await replica.stop()
    firing = [(d["kind"], d["node"], d["gpu"]) for d in alert_docs(records) if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]
    assert any("SCRAM" in r.getMessage() or "sasl" in r.getMessage().lower() for r in caplog.records)
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(settings) and PASSWORD not in settings.model_dump_json()


async def test_a_wrong_scram_password_is_refused_with_a_clear_error_not_a_hang(
    scram_broker: tuple[KafkaBroker, str], caplog: pytest.LogCaptureFixture
) -> None:
    broker, sasl_bootstrap = scram_broker
    topics = await create_service_topics(broker.bootstrap, partitions=2)
    settings = scram_settings(settings_for(broker.bootstrap, topics, "wrong"), sasl_bootstrap, "not-it")
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    with pytest.raises(ConnectionError, match="over SASL_PLAINTEXT as prexid \\(SCRAM-SHA-512\\)"):
        await asyncio.wait_for(runner.run(), 30)
    assert "invalid credentials" in caplog.text
    assert "not-it" not in caplog.text
