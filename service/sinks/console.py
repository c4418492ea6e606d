"""How alerts look in a terminal: one rich line each, pre-XID warnings and Xids easy to tell apart."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from prexid.service.schemas import Alert

STYLE = {"pre_xid": "bold yellow", "xid": "bold red", "node": "magenta", "cluster": "bold magenta"}


def alert_line(alert: Alert) -> Text:
    when = alert.ends_at if alert.status == "resolved" else alert.starts_at
    where = f"{alert.node}/gpu{alert.gpu}" if alert.gpu is not None else alert.node
    text = Text()
    text.append(f"{when} ", style="dim")
    text.append(f"{alert.status.upper():8} ", style="green" if alert.status == "resolved" else "bold")
    text.append(f"{alert.kind:8} ", style=STYLE.get(alert.kind, ""))
    text.append(f"{where:14} score={alert.score:.2f}  {alert.summary}")
    if alert.recommended_action:
        text.append(f"  -> {alert.recommended_action}", style="italic")
    return text


def print_alerts(console: Console, alerts: list[Alert]) -> None:
    for alert in alerts:
        console.print(alert_line(alert))
