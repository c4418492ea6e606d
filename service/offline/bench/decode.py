"""`prexid bench decode`: samples/s of every metric decoder, against plain `json.loads` of the same data.

Each format gets the same synthetic samples (DCGM-like GPU series), rendered in that format. The
baseline is `json.loads` of every JSON payload (for text formats: of the same samples rendered as
prometheus-kafka-adapter JSON, the cheapest JSON a producer would send instead; for `otlp_proto`: of
the same requests as JSON), timed in this run, so the ratio holds on any machine. Targets: JSON and
protobuf decoders >= 0.5x the baseline's samples/s (within 2x of `json.loads` alone); the text
exposition >= 1M samples/s.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from google.protobuf.json_format import Parse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from rich.console import Console
from rich.table import Table

from prexid.service.decode import formats, prom_text
from prexid.service.decode.types import Samples
from prexid.service.offline.bench.timing import best_times

REF_TS = 1_796_205_600.0
_METRICS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL")


@dataclass(frozen=True)
class Case:
    format: str
    payloads: list[bytes]
    samples: int
    baseline_payloads: list[bytes]  # what json.loads is timed on


def _series(n: int) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for i in range(n):
        labels = {"gpu": str(i % 8), "UUID": f"GPU-{i % 8:08d}", "Hostname": f"node-{i // 32:03d}"}
        out.append((_METRICS[(i // 8) % len(_METRICS)], labels, 40.0 + i % 50))
    return out


def cases(n: int = 20_000) -> list[Case]:
    series = _series(n)
    adapter = [
        orjson.dumps({"timestamp": "2026-12-02T13:00:15Z", "value": str(v), "name": m, "labels": lab})
        for m, lab, v in series
    ]
    vector = [
        orjson.dumps(
            {
                "name": m,
                "tags": lab,
                "timestamp": "2026-12-02T13:00:15Z",
                "kind": "absolute",
                "gauge": {"value": v},
            }
        )
        for m, lab, v in series
    ]
    telegraf = [
        orjson.dumps({"name": m, "fields": {"gauge": v}, "tags": lab, "timestamp": 1796216415})
        for m, lab, v in series
    ]
    otlp = [_otlp(series[i : i + 100]) for i in range(0, n, 100)]
    otlp_proto = [Parse(p, ExportMetricsServiceRequest()).SerializeToString() for p in otlp]
    text = "".join(
        f"# HELP {m} gauge\n# TYPE {m} gauge\n" * (i % 8 == 0)
        + f'{m}{{gpu="{lab["gpu"]}",UUID="{lab["UUID"]}",Hostname="{lab["Hostname"]}"}} {v}\n'
        for i, (m, lab, v) in enumerate(series)
    ).encode()
    influx = "".join(
        f"{m},gpu={lab['gpu']},UUID={lab['UUID']},Hostname={lab['Hostname']} gauge={v} 1796216415000000000\n"
        for m, lab, v in series
    ).encode()
    return [
        Case("prom_kafka_adapter", adapter, n, adapter),
        Case("vector", vector, n, vector),
        Case("telegraf_json", telegraf, n, telegraf),
        Case("otlp_json", otlp, n, otlp),
        Case("otlp_proto", otlp_proto, n, otlp),
        Case("prom_text", [text], n, adapter),
        Case("prom_text (first scrape)", [text], n, adapter),
        Case("influx", [influx], n, adapter),
    ]


def _otlp(series: list[tuple[str, dict[str, str], float]]) -> bytes:
    points = [
        {
            "name": m,
            "gauge": {
                "dataPoints": [
                    {
                        "attributes": [{"key": k, "value": {"stringValue": x}} for k, x in lab.items()],
                        "timeUnixNano": "1796216415000000000",
                        "asDouble": v,
                    }
                ]
            },
        }
        for m, lab, v in series
    ]
    return orjson.dumps({"resourceMetrics": [{"resource": {}, "scopeMetrics": [{"metrics": points}]}]})


def best_rates(
    ours: Callable[[], object], base: Callable[[], object], samples: int, seconds: float
) -> tuple[float, float]:
    """Best samples/s of each, runs alternated within `seconds` (`timing.best_times`, wall time)."""
    ours_s, base_s = best_times((ours, base), seconds)
    return samples / ours_s, samples / base_s


def _cold_prom_text(payload: bytes, ref_ts: float) -> Samples:
    """A scrape whose series were never seen: the label-parsing cache is emptied first."""
    prom_text.forget_series()
    return prom_text.decode(payload, ref_ts)


def measure(case: Case, seconds: float) -> tuple[float, float]:
    decode = (
        _cold_prom_text if case.format.endswith("(first scrape)") else formats.metric_decoder(case.format)
    )
    got = sum(len(decode(p, REF_TS)) for p in case.payloads)
    if got != case.samples:
        raise RuntimeError(f"{case.format}: decoded {got} samples, expected {case.samples}")
    return best_rates(
        lambda: [decode(p, REF_TS) for p in case.payloads],
        lambda: [json.loads(p) for p in case.baseline_payloads],
        case.samples,
        seconds,
    )


def _target(fmt: str, ours: float, ratio: float) -> tuple[str, bool]:
    if fmt.startswith("prom_text"):
        return "≥ 1M samples/s", ours >= 1e6
    if fmt == "influx":  # line protocol is text, not JSON: reported, no target
        return "(report only)", True
    return "ratio ≥ 0.5", ratio >= 0.5


def cmd_bench_decode(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 100))
    table = Table(title="prexid bench decode (one core; baseline: json.loads of the same samples, same run)")
    for col in ("format", "samples/s", "json.loads samples/s", "ratio", "target", "met"):
        table.add_column(col, justify="left" if col == "format" else "right", no_wrap=True)
    met_all = True
    with console.status("measuring") as status:
        for case in cases():
            status.update(f"measuring {case.format}")
            ours, base = measure(case, args.seconds)
            ratio = ours / base
            target, met = _target(case.format, ours, ratio)
            met_all &= met
            table.add_row(
                case.format, f"{ours:,.0f}", f"{base:,.0f}", f"{ratio:.2f}", target, "yes" if met else "NO"
            )
    console.print(table)
    return 0 if met_all else 1
