"""deploy/prexid.example.toml is a settings file prexid accepts, and every key in it means something."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from prexid.service.app.cli import main
from prexid.service.app.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy/prexid.example.toml"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("PREXID_")]:
        monkeypatch.delenv(key)


def test_the_example_config_loads_with_what_it_says() -> None:
    written = tomllib.loads(EXAMPLE.read_text())
    settings = Settings(config_file=EXAMPLE)
    assert settings.cluster == written["cluster"] == "b200-east"
    assert settings.alertmanager_urls == written["alertmanager_urls"]
    assert settings.kafka_security.protocol == "SASL_SSL"
    assert str(settings.kafka_security.ssl_cafile) == written["kafka_security"]["ssl_cafile"]
    assert settings.detection.fire_threshold == written["detection"]["fire_threshold"]
    assert settings.quarantine == type(settings.quarantine)()  # the example states the defaults


def test_a_mistyped_key_is_refused_not_ignored(tmp_path: Path) -> None:
    for text in (
        'clustr = "x"\n',
        "[detection]\nfire_treshold = 5.0\n",
        '[kafka_security]\nprotocl = "SSL"\n',
    ):
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            Settings(config_file=path)


def test_a_bad_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PREXID_DETECTION__PERSIST_TICKS", "zero")
    assert main(["run", "--duration", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PREXID_DETECTION__PERSIST_TICKS" in err[0] and "Traceback" not in err[0]


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"prexid {version('prexid')}"


def test_json_logs_are_one_object_per_line_with_the_traceback() -> None:
    import logging

    import orjson

    from prexid.service.app.cli import JsonLogFormatter

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        record = logging.LogRecord(
            "prexid.x", logging.ERROR, __file__, 1, "shard %d failed", (3,), sys.exc_info()
        )
    line = JsonLogFormatter().format(record)
    assert "\n" not in line
    parsed = orjson.loads(line)
    assert parsed["level"] == "error" and parsed["logger"] == "prexid.x"
    assert parsed["message"] == "shard 3 failed" and "RuntimeError: boom" in parsed["exception"]
    assert parsed["time"].endswith("+00:00")
