"""The wire shapes prexid reads, written by the simulators: prometheus-kafka-adapter JSON and RFC3164.

One place for them, so the demo, `prexid simulate` and the tests speak exactly what the decoders read.
Bulk encoding pre-renders each series' constant tail once; per sample only the value is formatted.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import orjson
from numpy.typing import NDArray


def host(n: int) -> str:
    return f"node-{n:02d}"


def pci(g: int) -> str:
    """DCGM's `pci_bus_id` label of GPU slot `g` (the Xid line says the short form)."""
    return f"00000000:{0x18 + 0x10 * g:02X}:00.0"


def gpu_labels(n: int, g: int, model: str = "NVIDIA B200") -> dict[str, str]:
    return {
        "gpu": str(g),
        "UUID": f"GPU-{n:04d}{g:04d}-0000-0000-0000-000000000000",
        "pci_bus_id": pci(g),
        "device": f"nvidia{g}",
        "modelName": model,
        "Hostname": host(n),
    }


def node_labels(n: int, **extra: str) -> dict[str, str]:
    return {"instance": f"{host(n)}:9100", "job": "node", **extra}


def rfc3339_seconds(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def adapter_json(name: str, labels: dict[str, str], ts: float, value: float) -> bytes:
    """One prometheus-kafka-adapter message: the value is a string, as the adapter sends it."""
    return orjson.dumps(
        {"timestamp": rfc3339_seconds(ts), "value": repr(float(value)), "name": name, "labels": labels}
    )


def syslog_line(ts: float, hostname: str, message: str) -> bytes:
    stamp = datetime.fromtimestamp(ts, tz=UTC).strftime("%b %e %H:%M:%S")
    return f"{stamp} {hostname} kernel: {message}".encode()


def xid_message(uptime_s: float, g: int, code: int, text: str, pid: int = 4242) -> str:
    short = pci(g)[4:].lower()[:10]
    return f"[{uptime_s:12.6f}] NVRM: Xid (PCI:{short}): {code}, pid={pid}, name=python3, {text}"


class AdapterEncoder:
    """Encodes whole scrapes (one value per series) as adapter JSON lines, the tail of each pre-rendered."""

    def __init__(self, series: list[tuple[str, dict[str, str]]]) -> None:
        self.tails = [
            b'","name":' + orjson.dumps(name) + b',"labels":' + orjson.dumps(labels) + b"}\n"
            for name, labels in series
        ]

    def encode(self, ts: float, values: NDArray[np.float64]) -> bytes:
        """All present (non-NaN) samples of one scrape, newline-separated.

        orjson formats the whole value vector at once (shortest round-trip repr, ~10x faster than
        per-value formatting); the pieces are interleaved with C-level slice assignment.
        """
        head = b'{"timestamp":"' + rfc3339_seconds(ts).encode() + b'","value":"'
        present = np.flatnonzero(~np.isnan(values))
        if len(present) == 0:
            return b""
        texts = orjson.dumps(values[present].tolist())[1:-1].split(b",")
        parts = [head] * (3 * len(present))
        parts[1::3] = texts
        parts[2::3] = (
            self.tails if len(present) == len(self.tails) else [self.tails[i] for i in present.tolist()]
        )
        return b"".join(parts)
