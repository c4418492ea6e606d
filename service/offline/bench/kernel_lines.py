"""`prexid bench kernel-lines`: what searching kernel lines costs when they repeat a pattern's beginning.

An attacker or a careless producer can send a long kernel line made of the beginning of a pattern
that never completes (`NVRM: Xid (PCI:0000:3b:00` over and over): a backtracking pattern with an
unbounded quantifier rescans the rest of the line from every beginning, quadratic in the line
(20 s for 1.5 MB before issue 15, item 5). Measured here, each timed in CPU seconds of this process
(`time.process_time`, best of runs alternated within `--seconds`, so load from other processes
reaches every figure alike and the least disturbed run is kept):

- **per byte**: decoding (every log envelope) and `extract_events` of a 256 KiB line made of one
  adversarial unit repeated, as a ratio to a benign line of the same length in the same envelope
  (ordinary text holding no pattern's beginning), timed in the same run; the worst unit is shown.
  Target: <= 20x (about 5x here: the adversarial line is searched, the benign one only decoded);
- **growth**: `extract_events` of 20 lines 4x as long, below the searched length (`MAX_LINE_CHARS`,
  so the patterns are measured, not the cap), as a ratio to the shorter ones. Target: < 8 (linear
  is 4, quadratic 16);
- **past the searched length**: `extract_events` of a 2 MB line with a second Xid at its end, as a
  ratio to a 16 KiB line: only the first `MAX_LINE_CHARS` are searched. Target: < 2.

Targets are printed beside the figures; the bench asserts nothing, and exits 1 if one is not met.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import orjson
from rich.console import Console
from rich.table import Table

from prexid.service.decode import formats
from prexid.service.decode.kernel_events import MAX_LINE_CHARS, extract_events
from prexid.service.decode.types import KernelLine
from prexid.service.offline.bench.timing import best_times
from prexid.service.schemas import KernelEvent, XidEvent

REF_TS = 1_796_205_600.0  # 2026-12-02T10:00:00Z
HOST = "node-a"
LOG_FORMATS = ("syslog", "rfc5424", "dmesg", "kmsg", "journald")
# Beginnings of every pattern on the hot path that never complete: each makes a backtracking
# pattern with an unbounded quantifier rescan the rest of the line.
ADVERSARIAL_UNITS = (
    "nvidia-nvswitch1: SXid (PCI:0000:86:00.0",
    "NVRM: Xid (PCI:0000:3b:00",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:03",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, ",
    "NVRM: GPU 0000:3b:00.0",
    "NVRM: GPU at PCI:0000:3b:00: ",
    "NVRM: Xid (",
    "SXid (PCI:",
    "Link 1",
    "0000:3b:00:",
)
BENIGN_UNIT = "the quick brown fox jumps over the lazy dog "  # no pattern's beginning
LINE_CHARS = 256 * 1024
HUGE_LINE_CHARS = 2_000_000
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus."

CPU = time.process_time  # this process's CPU time: other processes' load does not count
TARGET_PER_BYTE_RATIO = 20.0
TARGET_GROWTH = 8.0
TARGET_PAST_SEARCHED = 2.0


def envelope(fmt: str, message: str) -> bytes:
    """`message` as one kernel record of log format `fmt` (one of `LOG_FORMATS`)."""
    if fmt == "syslog":
        return f"<0>Dec  2 13:00:15 {HOST} kernel: {message}".encode()
    if fmt == "rfc5424":
        return f"<3>1 2026-12-02T13:00:15Z {HOST} kernel - - - {message}".encode()
    if fmt == "dmesg":
        return f"[ 1234.5] {message}".encode()
    if fmt == "kmsg":
        return f"3,1,1,-;{message}".encode()
    if fmt == "journald":
        return orjson.dumps({"MESSAGE": message, "_TRANSPORT": "kernel"})
    raise ValueError(f"unknown log format {fmt!r}")


def repeated(unit: str, chars: int) -> str:
    """`unit` over and over, cut to `chars` characters."""
    return (unit * (chars // len(unit) + 1))[:chars]


def decode_and_extract(fmt: str, payload: bytes) -> list[KernelEvent]:
    return extract_events(formats.log_decoder(fmt)(payload, REF_TS, HOST))


def check_whole_kernel_line(fmt: str, payload: bytes, chars: int) -> None:
    """Raise unless `payload` decodes to one kernel line of at least `chars` characters: a line the
    envelope did not vouch for is never searched, and the bench would time nothing."""
    lines = formats.log_decoder(fmt)(payload, REF_TS, HOST)
    if len(lines) != 1 or not lines[0].kernel or len(lines[0].message) < chars:
        shape = [(line.kernel, len(line.message)) for line in lines]
        raise RuntimeError(f"{fmt}: expected one kernel line of {chars} chars, got (kernel, chars) {shape}")


@dataclass(frozen=True, slots=True)
class PerByte:
    format: str
    chars: int
    benign_s: float
    worst_unit: str
    worst_s: float

    @property
    def ratio(self) -> float:
        return self.worst_s / self.benign_s


@dataclass(frozen=True, slots=True)
class Growth:
    unit: str
    short_chars: int
    short_s: float
    long_s: float

    @property
    def ratio(self) -> float:
        return self.long_s / self.short_s


@dataclass(frozen=True, slots=True)
class PastSearched:
    huge_chars: int
    huge_s: float
    searched_s: float

    @property
    def ratio(self) -> float:
        return self.huge_s / self.searched_s


def measure_per_byte(fmt: str, seconds: float, chars: int = LINE_CHARS) -> PerByte:
    """Every adversarial unit and the benign line in envelope `fmt`, alternated in one run."""
    benign = envelope(fmt, repeated(BENIGN_UNIT, chars))
    adversarial = [envelope(fmt, repeated(unit, chars)) for unit in ADVERSARIAL_UNITS]
    for payload in (benign, *adversarial):
        check_whole_kernel_line(fmt, payload, chars)
    calls = [partial(decode_and_extract, fmt, p) for p in (benign, *adversarial)]
    times = best_times(calls, seconds, clock=CPU, min_rounds=3)
    worst = max(range(len(ADVERSARIAL_UNITS)), key=lambda i: times[i + 1])
    return PerByte(fmt, chars, times[0], ADVERSARIAL_UNITS[worst], times[worst + 1])


def measure_growth(seconds: float, long_chars: int = MAX_LINE_CHARS // 2, lines: int = 20) -> list[Growth]:
    """Each unit's lines at `long_chars` against a quarter of it, below the searched length."""
    if long_chars > MAX_LINE_CHARS:
        raise ValueError(f"long_chars {long_chars} is past the searched length {MAX_LINE_CHARS}")
    short_chars = long_chars // 4
    batches = [
        [KernelLine(REF_TS, HOST, repeated(unit, chars), True)] * lines
        for unit in ADVERSARIAL_UNITS
        for chars in (short_chars, long_chars)
    ]
    times = best_times([partial(extract_events, b) for b in batches], seconds, clock=CPU, min_rounds=3)
    return [
        Growth(unit, short_chars, times[2 * i], times[2 * i + 1]) for i, unit in enumerate(ADVERSARIAL_UNITS)
    ]


def measure_past_searched(seconds: float, huge_chars: int = HUGE_LINE_CHARS) -> PastSearched:
    """A huge line with an Xid at its start and another past the searched length, against a line of
    the searched length with the same start."""
    huge = [KernelLine(REF_TS, HOST, XID + " " + "x" * huge_chars + XID, True)]
    searched = [KernelLine(REF_TS, HOST, (XID + " " + "x" * MAX_LINE_CHARS)[:MAX_LINE_CHARS], True)]
    for batch in (huge, searched):
        codes = [e.code if isinstance(e, XidEvent) else e.kind for e in extract_events(batch)]
        if codes != [79]:
            raise RuntimeError(f"expected only the first Xid (79) to be read, got {codes}")
    huge_s, searched_s = best_times(
        [lambda: extract_events(huge), lambda: extract_events(searched)], seconds, clock=CPU, min_rounds=3
    )
    return PastSearched(huge_chars, huge_s, searched_s)


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def _table(title: str, columns: Sequence[str]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def cmd_bench_kernel_lines(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 130))
    met_all = True
    with console.status("measuring") as status:
        per_byte = []
        for fmt in LOG_FORMATS:
            status.update(f"measuring {fmt}: 256 KiB lines, every adversarial unit and a benign one")
            per_byte.append(measure_per_byte(fmt, args.seconds))
        status.update("measuring growth below the searched length")
        growth = measure_growth(args.seconds)
        status.update("measuring a 2 MB line")
        past = measure_past_searched(args.seconds)

    table = _table(
        f"decode + extract_events of a {LINE_CHARS // 1024} KiB line (CPU time, best of each, same run)",
        ("format", "benign ns/B", "adversarial ns/B", "worst unit", "ratio", "target", "met"),
    )
    for r in per_byte:
        ok = r.ratio <= TARGET_PER_BYTE_RATIO
        met_all &= ok
        table.add_row(
            r.format,
            f"{r.benign_s / r.chars * 1e9:.1f}",
            f"{r.worst_s / r.chars * 1e9:.1f}",
            repr(r.worst_unit),
            f"{r.ratio:.2f}",
            f"≤ {TARGET_PER_BYTE_RATIO:g}",
            _met(ok),
        )
    console.print(table)

    short, long = growth[0].short_chars, growth[0].short_chars * 4
    table = _table(
        f"extract_events of 20 lines, {long:,} chars against {short:,} "
        f"(below the searched length, {MAX_LINE_CHARS:,})",
        ("unit", f"{short:,} chars ms", f"{long:,} chars ms", "ratio", "target", "met"),
    )
    for g in growth:
        ok = g.ratio < TARGET_GROWTH
        met_all &= ok
        table.add_row(
            repr(g.unit),
            f"{g.short_s * 1e3:.3f}",
            f"{g.long_s * 1e3:.3f}",
            f"{g.ratio:.2f}",
            f"< {TARGET_GROWTH:g} (quadratic 16)",
            _met(ok),
        )
    console.print(table)

    ok = past.ratio < TARGET_PAST_SEARCHED
    met_all &= ok
    table = _table(
        "extract_events of one line with an Xid past the searched length",
        ("line", "µs", "ratio", "target", "met"),
    )
    table.add_row(
        f"{MAX_LINE_CHARS:,} chars (the searched length)", f"{past.searched_s * 1e6:.1f}", "1", "", ""
    )
    table.add_row(
        f"{past.huge_chars / 1e6:g} M chars, a second Xid at the end",
        f"{past.huge_s * 1e6:.1f}",
        f"{past.ratio:.2f}",
        f"< {TARGET_PAST_SEARCHED:g}",
        _met(ok),
    )
    console.print(table)
    return 0 if met_all else 1
