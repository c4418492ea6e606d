from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from prexid.service.app.settings import Settings


def test_environment_overrides_the_toml_file_which_overrides_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "prexid.toml"
    cfg.write_text('cluster = "b200-a"\nalerts_topic = "from-file"\n[detection]\npersist_ticks = 5\n')
    monkeypatch.setenv("PREXID_CONFIG_FILE", str(cfg))
    monkeypatch.setenv("PREXID_ALERTS_TOPIC", "from-env")
    monkeypatch.setenv("PREXID_DETECTION__FIRE_THRESHOLD", "9.5")
    s = Settings()
    assert (s.cluster, s.alerts_topic) == ("b200-a", "from-env")
    assert (s.detection.persist_ticks, s.detection.fire_threshold) == (5, 9.5)


def test_settings_are_frozen_and_validated() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.cluster = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Settings(http_port=70000)


def test_an_empty_admin_token_in_the_environment_is_refused_not_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREXID_ADMIN_TOKEN", "")
    with pytest.raises(ValidationError, match="admin_token"):
        Settings()
    monkeypatch.delenv("PREXID_ADMIN_TOKEN")
    assert Settings().admin_token is None  # unset: the admin endpoints are off
