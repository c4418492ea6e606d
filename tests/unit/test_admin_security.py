"""Admin endpoints need the bearer token; Kafka secrets stay secret."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from pydantic import SecretStr

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import KafkaSecurity, Settings
from prexid.service.app.wiring import build
from prexid.service.http.api import create_app
from prexid.service.sources.kafka_security import client_options

TOKEN = "s3cret-token-0123456789"


def client(token: str | None) -> httpx.AsyncClient:
    state, _ = build(Settings(admin_token=SecretStr(token) if token else None))
    return client_of(state)


def client_of(state: ServiceState) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(state))
    return httpx.AsyncClient(transport=transport, base_url="http://prexid")


async def test_admin_endpoints_answer_only_with_the_right_bearer_token() -> None:
    async with client(TOKEN) as http:
        assert (await http.get("/admin/partitions")).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await http.get("/admin/partitions", headers=wrong)).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        response = await http.get("/admin/partitions", headers=right)
        assert response.status_code == 200 and response.json() == {}
        assert (await http.post("/admin/checkpoint", headers=right)).status_code == 409  # no Kafka feed


async def test_admin_endpoints_are_off_without_a_token() -> None:
    async with client(None) as http:
        response = await http.get("/admin/partitions", headers={"Authorization": "Bearer anything"})
        assert response.status_code == 404


@pytest.mark.parametrize("token", ["", " " * 20, "short-token-15ch"[:15]])
def test_an_empty_or_short_admin_token_is_refused_not_taken_as_unset(token: str) -> None:
    with pytest.raises(ValueError, match=r"(?s)admin_token.*at least 16 characters"):
        Settings(admin_token=SecretStr(token))
    Settings(admin_token=SecretStr("x" * 16))  # 16 is enough


def test_an_empty_admin_token_in_the_environment_stops_the_cli_with_one_line_naming_it() -> None:
    env = {"PREXID_ADMIN_TOKEN": "", "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "prexid.service.app.cli", "parse", "metrics"]
    done = subprocess.run(cmd, env=env, input=b"", capture_output=True, timeout=120)
    assert done.returncode == 2, done.stderr.decode()
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "PREXID_ADMIN_TOKEN" in lines[0] and "at least 16" in lines[0], lines


async def test_an_empty_token_put_in_the_state_directly_still_opens_nothing() -> None:
    state, _ = build(Settings())
    state.admin_token = SecretStr("")  # past the settings check: the endpoint must stay off
    async with client_of(state) as http:
        assert (await http.get("/admin/partitions", headers={"Authorization": "Bearer "})).status_code == 404
        assert (await http.get("/admin/partitions")).status_code == 404


def test_the_http_server_binds_loopback_by_default() -> None:
    assert Settings().http_host == "127.0.0.1"


def test_kafka_secrets_are_hidden_from_repr_and_dumps_but_reach_the_client() -> None:
    sec = KafkaSecurity(protocol="SASL_SSL", sasl_username="prexid", sasl_password=SecretStr("hunter2"))
    settings = Settings(kafka_security=sec, admin_token=SecretStr("tok-123-tok-123-tok"))
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "hunter2" not in text and "tok-123" not in text
    opts = client_options(settings)
    assert opts["sasl_plain_password"] == "hunter2" and opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert opts["security_protocol"] == "SASL_SSL" and opts["ssl_context"] is not None


def test_sasl_without_credentials_is_a_clear_configuration_error() -> None:
    with pytest.raises(ValueError, match=r"needs kafka_security\.sasl_username and sasl_password"):
        client_options(Settings(kafka_security=KafkaSecurity(protocol="SASL_PLAINTEXT")))


def test_kafka_security_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREXID_KAFKA_SECURITY__PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("PREXID_KAFKA_SECURITY__SASL_USERNAME", "prexid")
    monkeypatch.setenv("PREXID_KAFKA_SECURITY__SASL_PASSWORD", "from-env")
    sec = Settings().kafka_security
    assert sec.protocol == "SASL_PLAINTEXT" and sec.sasl_password is not None
    assert sec.sasl_password.get_secret_value() == "from-env"
