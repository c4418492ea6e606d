"""docker-compose.yml under Debian's docker-compose (no Docker engine needed), and its wiring checked
against what prexid actually reads: `Settings` built from the prexid service's environment."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from prexid.service.app import cli
from prexid.service.app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as docker-compose resolves it (anchors merged, paths absolute, ports normalised)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is missing: apt-get install docker-compose (in .ci/apt-packages.txt)")
    run = subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return dict(yaml.safe_load(run.stdout)["services"])


def ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host ip, published, container port) of each `host_ip:published:target/proto` mapping."""
    out = []
    for spec in service.get("ports", []):
        host_ip, published, target = str(spec).split("/")[0].rsplit(":", 2)
        out.append((host_ip, int(published), int(target)))
    return out


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of each bind mount `source:target[:mode]`."""
    return {str(v).split(":")[1]: Path(str(v).split(":")[0]) for v in service.get("volumes", [])}


@pytest.fixture(scope="module")
def settings(compose: dict[str, Any]) -> Settings:
    env = compose["prexid"]["environment"]
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("PREXID_")]:
            mp.delenv(key)
        for key, value in env.items():
            mp.setenv(key, str(value))
        return Settings()


def test_every_prexid_variable_in_compose_is_a_setting_prexid_reads(compose: dict[str, Any]) -> None:
    fields = set(Settings.model_fields)
    unknown = [k for k in compose["prexid"]["environment"] if k.removeprefix("PREXID_").lower() not in fields]
    assert unknown == []


def test_prexid_listens_on_all_interfaces_inside_its_container_on_the_published_port(
    compose: dict[str, Any], settings: Settings
) -> None:
    assert settings.http_host == "0.0.0.0"
    assert {target for _, _, target in ports(compose["prexid"])} == {
        settings.http_port,
        settings.fleet_http_port,
    }
    assert {ip for s in compose.values() for ip, _, _ in ports(s)} == {"127.0.0.1"}


def test_prexid_and_the_simulator_bootstrap_from_the_kafka_service_listener(
    compose: dict[str, Any], settings: Settings
) -> None:
    advertised = compose["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"PLAINTEXT://{settings.kafka_bootstrap}" in advertised.split(",")
    assert settings.kafka_bootstrap.split(":")[0] == "kafka"
    sim = cli.parser().parse_args(compose["simulator"]["command"])
    assert sim.command == "simulate" and sim.format == "kafka" and sim.bootstrap == settings.kafka_bootstrap
    assert sim.realtime and sim.speed > 0  # a live cluster, not one produced as fast as it can and gone
    assert (sim.metrics_topic, sim.logs_topic) == (settings.metrics_topics[0], settings.logs_topics[0])


def test_every_prexid_service_command_is_one_prexid_s_own_parser_accepts(compose: dict[str, Any]) -> None:
    """The quick start failed: the simulator ran `simulate --kafka-bootstrap`, which never existed."""
    built = {n: s for n, s in compose.items() if s.get("image") == compose["prexid"]["image"]}
    assert {"prexid", "simulator"} <= set(built)
    for name, service in built.items():
        try:
            cli.parser().parse_args(service["command"])
        except SystemExit:
            pytest.fail(f"compose service {name!r}: prexid {shlex.join(service['command'])} is refused")


def test_the_topic_job_creates_every_topic_prexid_reads_and_writes(
    compose: dict[str, Any], settings: Settings
) -> None:
    script = " ".join(compose["kafka-topics"]["command"])
    created = set(shlex.split(re.search(r"for t in ([^;]+);", script).group(1)))  # type: ignore[union-attr]
    wanted = {
        *settings.metrics_topics,
        *settings.logs_topics,
        settings.alerts_topic,
        settings.dead_letter_topic,
    }
    assert created == wanted
    assert compose["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_prometheus_scrapes_prexid_where_it_listens_and_loads_the_mounted_rules(
    compose: dict[str, Any], settings: Settings
) -> None:
    mounts_ = mounts(compose["prometheus"])
    config = yaml.safe_load(mounts_["/etc/prometheus/prometheus.yml"].read_text())
    job = next(
        j for j in config["scrape_configs"] if j["job_name"] == "prexid"
    )  # the rules match job="prexid"
    assert job["static_configs"][0]["targets"] == [f"prexid:{settings.http_port}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    for rule_file in config["rule_files"]:
        assert mounts_[f"/etc/prometheus/{rule_file}"] == ROOT / "deploy/prometheus/rules.yml"
    am = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == [f"alertmanager:{ports(compose['alertmanager'])[0][2]}"]


def test_prometheus_config_passes_promtool_check_config() -> None:
    run = subprocess.run(
        ["promtool", "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_grafana_is_provisioned_with_the_prexid_dashboard_and_the_prometheus_service(
    compose: dict[str, Any],
) -> None:
    grafana = mounts(compose["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    provider = yaml.safe_load((provisioning / "dashboards/prexid.yml").read_text())["providers"][0]
    dashboards = [t for t, src in grafana.items() if src == ROOT / "deploy/grafana/prexid.json"]
    assert [str(Path(t).parent) for t in dashboards] == [provider["options"]["path"]]
    source = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())["datasources"][0]
    assert source["url"] == f"http://prometheus:{ports(compose['prometheus'])[0][2]}"


def test_prexid_posts_its_alerts_to_the_alertmanager_service(
    compose: dict[str, Any], settings: Settings
) -> None:
    assert settings.alertmanager_urls == [f"http://alertmanager:{ports(compose['alertmanager'])[0][2]}"]


def test_alertmanager_loads_the_example_config(compose: dict[str, Any]) -> None:
    assert (
        mounts(compose["alertmanager"])["/etc/alertmanager/alertmanager.yml"]
        == ROOT / "deploy/alertmanager/alertmanager.yml"
    )


def test_prexid_and_the_simulator_are_built_from_the_repository_dockerfile(compose: dict[str, Any]) -> None:
    for name in ("prexid", "simulator"):
        assert Path(compose[name]["build"]["context"]) == ROOT
        assert (ROOT / compose[name]["build"].get("dockerfile", "Dockerfile")).is_file()
