"""The Slurm backend of the quarantine action: a command hook, by default
`scontrol update nodename={node} state=drain reason={reason}` (and `state=resume` to undo).

Each argv element is a template filled with the order's fields; the command runs without a shell (a
node name or reason cannot inject anything), with a timeout. A non-zero exit is a failure the action
retries; a missing executable is not retried.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence

from prexid.service.actions.quarantine import ActionError, Order, Retrying

MAX_REASON = 200  # Slurm keeps the reason in its state; keep it a line


def fill(template: Sequence[str], **fields: object) -> list[str]:
    """argv with `{name}` fields filled in; an unknown field is an error at start, not at a page."""
    try:
        return [part.format(**fields) for part in template]
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"bad field in command template {list(template)}: {err}") from err


class SlurmHook:
    def __init__(
        self,
        drain: Sequence[str],
        resume: Sequence[str],
        timeout_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.drain, self.resume = list(drain), list(resume)
        self.timeout_s = timeout_s
        self.clock = clock
        fill(self.drain, node="n", reason="r", kind="k", xid_code="", alert="a")  # refuse a bad one now
        fill(self.resume, node="n", who="w")

    def _run(self, argv: list[str]) -> None:
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as err:
            raise ActionError(f"{argv[0]}: not found", retry=False) from err
        except (subprocess.TimeoutExpired, OSError) as err:
            raise ActionError(f"{argv[0]}: {err}") from err
        if run.returncode != 0:
            raise ActionError(f"{' '.join(argv)} exited {run.returncode}: {run.stderr.strip()[-500:]}")

    def quarantine(self, order: Order, retrying: Retrying) -> float:
        reason = f"prexid {order.kind}: {order.summary}"[:MAX_REASON]
        xid = "" if order.xid_code is None else str(order.xid_code)
        fields = {"node": order.node, "reason": reason, "kind": order.kind, "xid_code": xid}
        argv = fill(self.drain, **fields, alert=order.fingerprint)
        retrying(f"drain {order.node}", lambda: self._run(argv))
        return float(self.clock())

    def release(self, node: str, who: str, retrying: Retrying) -> None:
        argv = fill(self.resume, node=node, who=who)
        retrying(f"resume {node}", lambda: self._run(argv))
