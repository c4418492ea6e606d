"""PNG plots for the report: lead-time distributions, and one failure's timeline with its signals."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import orjson
from matplotlib.lines import Line2D

from prexid.service.offline.evaluate.match import Detection, Label, Result, entity_matches

SYSTEM_COLOURS = ("tab:green", "tab:brown", "tab:olive", "tab:purple", "tab:cyan", "tab:pink")
COMMON_METRICS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK")
_ECC = ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")
TYPE_METRICS = {  # the failure type's own precursor signals, by type-name prefix
    "xid79": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
    "xid48": _ECC,
    "xid94": _ECC,
    "xid95": _ECC,
    "xid63": _ECC,
    "xid64": _ECC,
    "xid74": (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    ),
    "xid119": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",),
    "thermal": ("DCGM_FI_DEV_THERMAL_VIOLATION",),
    "straggler": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",),
}


def lead_times(results: dict[str, Result], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    bins = np.r_[0, np.geomspace(0.25, 720, 24)]
    for name, r in results.items():
        leads = [o.lead_s / 60 for o in r.outcomes if o.lead_s is not None]
        if leads:
            ax.hist(leads, bins=bins, histtype="step", linewidth=2, label=f"{name} (n={len(leads)})")
    ax.set_xscale("symlog", linthresh=1)
    ax.axvline(5, color="grey", linestyle=":", label="5 min target")
    ax.set_xlabel("lead time before the Xid (minutes)")
    ax.set_ylabel("failures")
    ax.set_title("Lead time of pre-XID alerts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pick_failure(result: Result) -> Label | None:
    """The detected pre-XID failure with the median lead, else any failure with a precursor."""
    pre = sorted((o for o in result.outcomes if o.lead_s is not None), key=lambda o: o.lead_s or 0.0)
    if pre:
        return pre[len(pre) // 2].label
    with_pre = [o.label for o in result.outcomes if o.label.has_precursor and o.label.gpu is not None]
    return with_pre[0] if with_pre else None


def window_values(
    data: Path, f: Label, t0: float, t1: float
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """The failing GPU's timeline metrics between t0 and t1, read from the columnar chunks."""
    series = [orjson.loads(x) for x in (data / "series.jsonl").read_bytes().splitlines()]
    cols = {
        s["name"]: i
        for i, s in enumerate(series)
        if s["labels"].get("Hostname") == f.node and s["labels"].get("gpu") == str(f.gpu)
    }
    wanted = [m for m in (*COMMON_METRICS, *TYPE_METRICS.get(f.type.split("_")[0], ())) if m in cols]
    ts_parts, val_parts = [], []
    for chunk in sorted(data.glob("metrics-*.npz")):
        with np.load(chunk) as blob:
            ts = blob["ts"]
            keep = (ts >= t0) & (ts <= t1)
            if keep.any():
                ts_parts.append(ts[keep])
                val_parts.append(blob["values"][keep][:, [cols[m] for m in wanted]])
    if not ts_parts:
        return None
    return wanted, np.concatenate(ts_parts), np.vstack(val_parts)


def timeline(data: Path, f: Label, alerts: dict[str, list[Detection]], path: Path) -> Path | None:
    """The failing GPU's signals from an hour before onset to 20 min after the Xid, alerts marked."""
    t0, t1 = f.onset_ts - 3600, f.deadline + 1200
    found = window_values(data, f, t0, t1)
    if found is None:
        return None
    wanted, ts, vals = found
    minutes = (ts - (f.xid_ts or f.deadline)) / 60
    fig, axes = plt.subplots(len(wanted), 1, figsize=(9, 1.6 * len(wanted) + 1.4), sharex=True)
    anchor = f.xid_ts or f.deadline
    colours = dict(zip(alerts, SYSTEM_COLOURS, strict=False))
    for ax, m, y in zip(np.atleast_1d(axes), wanted, vals.T, strict=True):
        counter = any(k in m for k in ("COUNTER", "TOTAL", "ROWS", "VIOLATION"))
        ax.plot(
            minutes[1:] if counter else minutes, np.diff(y) if counter else y, color="tab:blue", linewidth=1
        )
        short = m.split("_FI_")[-1].removeprefix("DEV_").removesuffix("_COUNT_TOTAL").lower()
        ax.set_ylabel(short + ("/scrape" if counter else ""), fontsize=7)
        ax.axvline((f.onset_ts - anchor) / 60, color="black", linestyle="--")
        ax.axvline(0, color="red", linewidth=2)
        for name, dets in alerts.items():
            for d in dets:
                if entity_matches(d, f) and t0 <= d.t <= t1:
                    ax.axvline((d.t - anchor) / 60, color=colours[name], alpha=0.7, linewidth=1.2)
    handles = [Line2D([], [], color="black", linestyle="--", label="precursor onset")]
    handles += [Line2D([], [], color="red", linewidth=2, label=f"Xid {f.xid_code}" if f.xid_code else "end")]
    handles += [Line2D([], [], color=c, label=f"{n} alert") for n, c in colours.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    np.atleast_1d(axes)[-1].set_xlabel("minutes from the Xid (or the end of an Xid-less failure)")
    fig.suptitle(
        f"{f.id} {f.type} on {f.node} GPU {f.gpu}: its signals and every system's alerts", fontsize=9
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
