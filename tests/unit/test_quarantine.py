"""The quarantine action's policy: dry run first, never on a cluster alert, a circuit breaker that pages,
retries counted, the consumer loop never waiting, undo recorded, drains booked once.

The backend here is an in-process recorder: what it tests is the policy. The Kubernetes backend is
tested against a real kube-apiserver (tests/integration/test_quarantine_k8s.py), the Slurm hook
against a stand-in command (below)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from prexid.service.actions.quarantine import ActionError, Order, QuarantineAction, Retrying
from prexid.service.actions.slurm import SlurmHook
from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import QuarantineSettings, Settings
from prexid.service.app.wiring import build, quarantine_action
from prexid.service.http.api import create_app
from prexid.service.schemas import Alert, Signal, rfc3339

T0 = 1_764_756_000.0
TOKEN = "admin-token-0123456789"


class Recorder:
    """A backend that records what it was asked, and can fail or block on demand."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_next = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def quarantine(self, order: Order, retrying: Retrying) -> float:
        return retrying(f"cordon {order.node}", lambda: self._quarantine(order))

    def _quarantine(self, order: Order) -> float:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_next:
            self.fail_next -= 1
            raise ActionError("API server said 503")
        self.calls.append(("quarantine", order.node))
        return order.first_sample + 1.5

    def release(self, node: str, who: str, retrying: Retrying) -> None:
        self.calls.append(("release", f"{node} by {who}"))


def alert(
    node: str, kind: str = "xid", severity: str = "critical", status: str = "firing", fp: str | None = None
) -> Alert:
    return Alert(
        fingerprint=fp or f"fp-{kind}-{node}",
        status=status,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        severity=severity,  # type: ignore[arg-type]
        cluster="c",
        node=node if kind != "cluster" else "",
        gpu=3 if kind != "cluster" else None,
        starts_at=rfc3339(T0),
        ends_at=None,
        score=0.9,
        signals=[
            Signal(
                family="ecc",
                metric="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                labels={},
                value=4.0,
                baseline=0.0,
                surprise=12.0,
            )
        ],
        summary=f"GPU 3 on {node} fell off the bus",
        xid_code=79 if kind == "xid" else None,
        recommended_action="Drain the node, reboot it, and open a service ticket." if kind == "xid" else None,
    )


def wired(**q: Any) -> tuple[ServiceState, QuarantineAction, Recorder, list[Alert]]:
    settings = Settings(admin_token=SecretStr(TOKEN), quarantine=QuarantineSettings(enabled=True, **q))
    state, _ = build(settings.model_copy(update={"quarantine": QuarantineSettings()}))  # wire it below
    backend = Recorder()
    action = quarantine_action(settings, state, backend)
    paged: list[Alert] = []
    state.alert_listeners += [action.submit, paged.extend]
    return state, action, backend, paged


@contextlib.asynccontextmanager
async def running(action: QuarantineAction) -> AsyncIterator[None]:
    task = asyncio.create_task(action.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def settled(action: QuarantineAction) -> None:
    await asyncio.wait_for(action.queue.join(), 10)


def count(state: ServiceState, name: str, **labels: str) -> float:
    return state.telemetry.registry.get_sample_value(name, labels) or 0.0


async def test_enabled_it_first_runs_dry_logging_and_counting_but_calling_nothing() -> None:
    state, action, backend, _ = wired()  # enabled=True, nothing else: dry_run stays True
    async with running(action):
        action.submit([alert("node-1")])
        await settled(action)
    assert backend.calls == []
    assert count(state, "prexid_quarantine_decisions_total", outcome="dry_run") == 1
    assert action.status()["held"][0]["state"] == "would"
    assert count(state, "prexid_quarantined_nodes", mode="dry_run") == 1


async def test_a_cluster_alert_quarantines_nobody_and_neither_does_an_unconfigured_kind() -> None:
    state, action, backend, _ = wired(dry_run=False)
    async with running(action):
        action.submit([alert("", kind="cluster"), alert("node-2", kind="pre_xid", severity="warning")])
        action.submit([alert("node-3", severity="warning")])  # an Xid of a warning code
        await settled(action)
    assert backend.calls == [] and action.held == {}
    assert count(state, "prexid_quarantine_decisions_total", outcome="cluster_wide") == 1


async def test_a_page_of_a_configured_kind_quarantines_once_and_books_one_failure() -> None:
    state, action, backend, _ = wired(dry_run=False)
    async with running(action):
        action.submit([alert("node-4")])
        action.submit([alert("node-4")])  # re-sent: already held
        await settled(action)
    assert backend.calls == [("quarantine", "node-4")]
    assert count(state, "prexid_quarantine_decisions_total", outcome="already") == 1
    assert count(state, "prexid_quarantine_event_to_cordon_seconds_count", kind="xid") == 1
    assert count(state, "prexid_quarantine_event_to_cordon_seconds_sum", kind="xid") == 1.5
    ledger = state.pipeline_of("node-4").ledger
    assert ledger.nodes["node-4"].counts == {"drain": 1}
    ledger.observe([alert("node-4")])  # the Xid itself: one failure in all, not two
    assert ledger.ranking()[0].failures_30d == 1


async def test_the_breaker_refuses_the_node_past_the_limit_pages_and_closes_after_an_undo() -> None:
    state, action, backend, paged = wired(dry_run=False, max_nodes=2, max_fraction=0.5)
    action.fleet_size = lambda: 10  # nodes watched: 5 by the share, 2 by max_nodes
    async with running(action):
        action.submit([alert(f"node-{i}") for i in range(4)])
        await settled(action)
        assert sorted(n for _, n in backend.calls) == ["node-0", "node-1"]
        assert count(state, "prexid_quarantine_breaker_open") == 1
        assert (
            count(state, "prexid_quarantine_breaker_trips_total", mode="enforce") == 1
        )  # one trip, 2 refused
        assert count(state, "prexid_quarantine_decisions_total", outcome="breaker") == 2
        pages = [a for a in paged if a.kind == "quarantine"]
        assert [(a.status, a.severity) for a in pages] == [("firing", "critical")]
        assert pages[0].runbook_url.endswith("/quarantine.md")
        await action.undo("node-0", "alice")
    assert count(state, "prexid_quarantine_breaker_open") == 0
    assert [a.status for a in paged if a.kind == "quarantine"] == ["firing", "resolved"]
    assert ("release", "node-0 by alice") in backend.calls


async def test_the_breaker_holds_a_share_of_the_fleet_at_least_one_node() -> None:
    _, action, _, _ = wired(max_nodes=10, max_fraction=0.1)
    action.fleet_size = lambda: 45
    assert action.limit() == 4
    action.fleet_size = lambda: 3
    assert action.limit() == 1


async def test_failed_calls_are_retried_with_backoff_and_counted() -> None:
    state, action, backend, _ = wired(dry_run=False, backoff_s=0.01)
    backend.fail_next = 2
    async with running(action):
        action.submit([alert("node-5")])
        await settled(action)
    assert backend.calls == [("quarantine", "node-5")]
    assert count(state, "prexid_quarantine_call_failures_total", op="quarantine") == 2


async def test_calls_that_keep_failing_leave_the_node_counted_and_marked_failed() -> None:
    state, action, backend, _ = wired(dry_run=False, backoff_s=0.01, retries=1)
    backend.fail_next = 5
    async with running(action):
        action.submit([alert("node-6")])
        await settled(action)
    assert action.status()["held"][0]["state"] == "failed"
    assert count(state, "prexid_quarantine_decisions_total", outcome="failed") == 1


async def test_the_event_loop_runs_on_while_the_api_server_call_blocks() -> None:
    """The backend blocks its thread until the loop itself lets it go: had it run on the loop, the
    loop could never reach the line that lets it go."""
    _, action, backend, _ = wired(dry_run=False)
    backend.gate = threading.Event()
    async with running(action):
        action.submit([alert("node-7")])
        assert await asyncio.to_thread(backend.entered.wait, 10)  # the backend's thread is inside
        assert action.held["node-7"].state == "working"
        backend.gate.set()
        await settled(action)
    assert backend.calls == [("quarantine", "node-7")]


async def test_a_healthy_period_undoes_it_by_itself_once_the_alerts_resolved() -> None:
    state, action, backend, _ = wired(dry_run=False, healthy_period_s=0.2)
    async with running(action):
        action.submit([alert("node-8")])
        await settled(action)
        await asyncio.sleep(0.3)
        assert "node-8" in action.held  # still firing: no healthy period has begun
        action.submit([alert("node-8", status="resolved")])
        for _ in range(100):
            if "node-8" not in action.held:
                break
            await asyncio.sleep(0.05)
    assert backend.calls[-1] == ("release", "node-8 by prexid (healthy for 0.2 s)")
    assert count(state, "prexid_quarantine_undos_total", how="healthy") == 1


async def test_undo_is_an_admin_endpoint_that_records_who() -> None:
    state, action, backend, _ = wired(dry_run=False)
    transport = httpx.ASGITransport(app=create_app(state))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with running(action), httpx.AsyncClient(transport=transport, base_url="http://p") as http:
        action.submit([alert("node-9")])
        await settled(action)
        assert (await http.post("/admin/quarantine/node-9/undo", json={"by": "bob"})).status_code == 401
        assert (
            await http.post("/admin/quarantine/node-0/undo", json={"by": "bob"}, headers=auth)
        ).status_code == 404
        assert (await http.post("/admin/quarantine/node-9/undo", json={}, headers=auth)).status_code == 422
        held = (await http.get("/admin/quarantine", headers=auth)).json()
        assert [h["node"] for h in held["held"]] == ["node-9"] and held["dry_run"] is False
        done = await http.post(
            "/admin/quarantine/node-9/undo", json={"by": "bob", "reason": "GPU swapped"}, headers=auth
        )
    assert done.status_code == 200 and done.json()["undone_by"] == "bob (GPU swapped)"
    assert backend.calls[-1] == ("release", "node-9 by bob (GPU swapped)")
    assert count(state, "prexid_quarantine_undos_total", how="admin") == 1


def test_cluster_alerts_cannot_be_configured_to_quarantine() -> None:
    with pytest.raises(ValueError, match="never quarantine"):
        QuarantineSettings(kinds=["xid", "cluster"])


def test_quarantine_is_off_by_default_and_nothing_listens() -> None:
    state, _ = build(Settings())
    assert state.quarantine is None and state.alert_listeners == []


# -- Slurm: the command hook, run against a stand-in `scontrol` that records its arguments ----------
def stand_in(tmp_path: Path, exit_code: int = 0) -> tuple[Path, Path]:
    record = tmp_path / "calls.txt"
    script = tmp_path / "scontrol"
    script.write_text(
        f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> {record}\necho --- >> {record}\nexit {exit_code}\n'
    )
    script.chmod(0o755)
    return script, record


def calls(record: Path) -> list[list[str]]:
    return [c.strip("\n").split("\n") for c in record.read_text().split("---\n") if c.strip()]


def hook(script: Path) -> SlurmHook:
    q = QuarantineSettings()
    return SlurmHook([str(script), *q.slurm_drain[1:]], [str(script), *q.slurm_resume[1:]], 5.0)


ONCE = Retrying(0, 0.001, lambda: None, time.sleep)


def order(node: str) -> Order:
    return Order(node, "xid", "fp1", 3, 79, T0, "GPU 3 on node-3 fell off the bus; $(rm -rf /)", "ev")


def test_the_slurm_hook_drains_and_resumes_with_scontrol_arguments(tmp_path: Path) -> None:
    script, record = stand_in(tmp_path)
    h = hook(script)
    h.quarantine(order("node-3"), ONCE)
    h.release("node-3", "carol", ONCE)
    assert calls(record) == [
        [
            "update",
            "nodename=node-3",
            "state=drain",
            "reason=prexid xid: GPU 3 on node-3 fell off the bus; $(rm -rf /)",
        ],
        ["update", "nodename=node-3", "state=resume"],
    ]  # one argv element each: no shell ever reads the reason


def test_a_failing_slurm_command_is_retried_and_a_missing_one_is_not(tmp_path: Path) -> None:
    script, record = stand_in(tmp_path, exit_code=1)
    failures: list[str] = []
    retrying = Retrying(2, 0.001, lambda: failures.append("x"), time.sleep)
    with pytest.raises(ActionError) as failed:
        hook(script).quarantine(order("node-3"), retrying)
    assert failed.value.retry and len(calls(record)) == 3 and len(failures) == 3  # tried, then twice more
    with pytest.raises(ActionError) as missing:
        hook(tmp_path / "nope").quarantine(order("node-3"), retrying)
    assert not missing.value.retry and len(failures) == 4  # counted, not retried


def test_a_bad_field_in_the_command_template_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="bad field"):
        SlurmHook(["scontrol", "nodename={host}"], ["scontrol"], 5.0)


async def test_the_slurm_hook_quarantines_through_the_action(tmp_path: Path) -> None:
    script, record = stand_in(tmp_path)
    state, _ = build(Settings())
    settings = Settings(quarantine=QuarantineSettings(enabled=True, dry_run=False, backend="slurm"))
    action = quarantine_action(settings, state, hook(script))
    async with running(action):
        action.submit([alert("node-3")])
        await settled(action)
    assert calls(record)[0][:3] == ["update", "nodename=node-3", "state=drain"]


def test_without_credentials_the_kubernetes_backend_stops_prexid_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SystemExit, match="no Kubernetes credentials from the pod's service account"):
        build(Settings(quarantine=QuarantineSettings(enabled=True)))
    with pytest.raises(SystemExit, match=r"no Kubernetes credentials from .*missing"):
        build(Settings(quarantine=QuarantineSettings(enabled=True, kubeconfig=tmp_path / "missing")))
