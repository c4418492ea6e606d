"""Round-trip properties: what a producer renders, prexid reads back exactly."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from prexid.service.decode import prom_text, telegraf
from prexid.service.decode.kernel_events import extract_events
from prexid.service.decode.types import KernelLine
from prexid.service.schemas import XidEvent

NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True).filter(lambda k: k != "host")
VALUE = st.floats(allow_nan=False, width=64)
LABELS = st.dictionaries(
    LABEL, st.text(max_size=12) | st.sampled_from([" # ", "a } # {b", "}", '"']), max_size=4
)


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(value: float) -> str:
    return {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, repr(value))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAME, LABELS, VALUE), min_size=1, max_size=20))
def test_any_exposition_reads_back_sample_for_sample(
    samples: list[tuple[str, dict[str, str], float]],
) -> None:
    body = "".join(
        f"{name}{{{','.join(f'{k}={chr(34)}{escape(v)}{chr(34)}' for k, v in labels.items())}}} {render(value)}\n"
        for name, labels, value in samples
    )
    got = prom_text.decode(body.encode(), 1e9)
    assert [(r.name, r.labels, r.value) for r in got.rows()] == samples


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
            st.dictionaries(
                st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
                st.from_regex(r"[a-zA-Z0-9 ,=]{1,8}", fullmatch=True),
                max_size=3,
            ),
            VALUE.filter(math.isfinite),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_any_line_protocol_reads_back(lines: list[tuple[str, dict[str, str], float]]) -> None:
    def esc(text: str) -> str:
        return text.replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")

    body = "".join(
        f"{m}{''.join(f',{esc(k)}={esc(v)}' for k, v in tags.items())} v={value!r} 1796216415000000000\n"
        for m, tags, value in lines
    )
    got = telegraf.decode_line_protocol(body.encode(), 0.0)
    assert [(r.name, r.labels, r.value) for r in got.rows()] == [(f"{m}_v", tags, v) for m, tags, v in lines]


HEX = "0123456789abcdefABCDEF"


@settings(max_examples=500, deadline=None)
@given(
    domain=st.text(HEX, min_size=4, max_size=8),
    bus=st.text(HEX, min_size=2, max_size=2),
    dev=st.text(HEX, min_size=2, max_size=2),
    code=st.integers(0, 999_999),
    pid=st.none() | st.integers(0, 4_000_000),
    prefix=st.sampled_from(["", "kernel: ", "kernel: [ 123.456] ", "[Sun Nov 30 02:20:00 2026] "]),
    text=st.from_regex(r"[A-Za-z0-9 .:()]{0,40}", fullmatch=True),
)
def test_any_xid_line_yields_its_code_pci_and_pid(
    domain: str, bus: str, dev: str, code: int, pid: int | None, prefix: str, text: str
) -> None:
    who = f"pid={pid}, name=python3, " if pid is not None else ""
    line = f"{prefix}NVRM: Xid (PCI:{domain}:{bus}:{dev}): {code}, {who}{text}"
    [ev] = extract_events([KernelLine(0.0, "n", line)])
    assert isinstance(ev, XidEvent)
    assert (ev.code, ev.pid) == (code, pid)
    assert ev.pci_bus_id == f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}"
    assert ev.message == text.strip()
