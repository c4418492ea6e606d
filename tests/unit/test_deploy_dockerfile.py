"""The Dockerfile, parsed with dockerfile-parse: multi-stage, non-root, health-checked on /healthz, and
every file it copies exists and is not excluded by .dockerignore."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from prexid.service.app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def instructions() -> list[dict[str, str]]:
    return list(DockerfileParser(str(ROOT / "Dockerfile")).structure)


def final_stage(instructions: list[dict[str, str]]) -> list[dict[str, str]]:
    last_from = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "FROM")
    return instructions[last_from:]


def test_the_image_is_built_in_two_stages_and_the_runtime_copies_only_the_wheels(
    instructions: list[dict[str, str]],
) -> None:
    froms = [ins["value"] for ins in instructions if ins["instruction"] == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    copies = [ins["value"] for ins in final_stage(instructions) if ins["instruction"] == "COPY"]
    assert copies == ["--from=build /wheels /wheels"]


def test_the_runtime_runs_as_an_unprivileged_user(instructions: list[dict[str, str]]) -> None:
    users = [ins["value"] for ins in final_stage(instructions) if ins["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    last_user = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "USER")
    assert all(ins["instruction"] != "RUN" for ins in instructions[last_user:])  # nothing runs as root after


def test_the_healthcheck_probes_healthz_on_the_port_prexid_listens_on(
    instructions: list[dict[str, str]],
) -> None:
    check = next(ins["value"] for ins in final_stage(instructions) if ins["instruction"] == "HEALTHCHECK")
    command = json.loads(check[check.index("CMD") + 3 :])
    assert "/healthz" in command[-1] and "PREXID_HTTP_PORT" in command[-1]
    env = DockerfileParser(str(ROOT / "Dockerfile")).envs
    assert env["PREXID_HTTP_HOST"] == "0.0.0.0"
    exposed = [ins["value"] for ins in final_stage(instructions) if ins["instruction"] == "EXPOSE"]
    assert exposed == [env["PREXID_HTTP_PORT"]] and int(env["PREXID_HTTP_PORT"]) == Settings().http_port


def test_the_entrypoint_is_the_prexid_console_script(instructions: list[dict[str, str]]) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entry = next(ins["value"] for ins in instructions if ins["instruction"] == "ENTRYPOINT")
    assert json.loads(entry)[0] in scripts


def included(path: str, ignore_lines: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: last matching pattern wins, `!` re-includes."""
    keep = True
    for pattern in ignore_lines:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
            keep = negate
    return keep


def test_every_build_stage_copy_source_exists_and_is_in_the_build_context(
    instructions: list[dict[str, str]],
) -> None:
    ignore = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    sources = [
        src
        for ins in instructions
        if ins["instruction"] == "COPY" and not ins["value"].startswith("--from")
        for src in ins["value"].split()[:-1]
    ]
    required = [s for s in sources if not s.endswith("*")]  # `README.md*` is optional
    assert required == ["pyproject.toml", "detectors", "service"]
    for src in required:
        assert (ROOT / src).exists() and included(src, ignore), src
    assert not included(".venv", ignore) and not included("tests", ignore)
    assert included("service/http/static/index.html", ignore)
