"""NVIDIA XID codes: what each means and what an SRE should do now (from NVIDIA's published catalog).

Severity decides paging: `critical` pages, `warning` notifies, `info` is recorded only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    severity: Severity
    action: str


ROWS: tuple[XidInfo, ...] = (
    XidInfo(8, "GPU stopped processing (idle timeout)", "warning", "Restart the application."),
    XidInfo(11, "Invalid or corrupted push buffer stream", "warning", "Restart the application."),
    XidInfo(
        13,
        "Graphics engine exception",
        "warning",
        "Restart the application; service the GPU only if it recurs across jobs.",
    ),
    XidInfo(31, "GPU memory page fault", "warning", "Restart the application; check for an application bug."),
    XidInfo(43, "GPU stopped processing", "warning", "Restart the application."),
    XidInfo(
        45, "Preemptive cleanup after a prior error", "info", "None by itself; look at the Xid before it."
    ),
    XidInfo(48, "Double-bit ECC error", "critical", "Drain the node and reset the GPU."),
    XidInfo(61, "Internal micro-controller breakpoint/warning", "warning", "Reset the GPU if it recurs."),
    XidInfo(62, "Internal micro-controller halt", "critical", "Drain the node and reset the GPU."),
    XidInfo(
        63,
        "Row remapping event / page retirement recorded",
        "warning",
        "Reset the GPU at the next drain to apply the remap.",
    ),
    XidInfo(
        64,
        "Row remapping / page retirement failure",
        "critical",
        "Drain the node; service the GPU if it recurs.",
    ),
    XidInfo(74, "NVLink error", "critical", "Reset the GPU; check NVLink links and NVSwitch."),
    XidInfo(
        79, "GPU has fallen off the bus", "critical", "Drain the node, reboot it, and open a service ticket."
    ),
    XidInfo(
        92, "High single-bit ECC error rate", "warning", "Watch the SBE trend; drain if it keeps rising."
    ),
    XidInfo(
        94, "Contained ECC error", "warning", "Restart the application; reset the GPU at the next drain."
    ),
    XidInfo(95, "Uncontained ECC error", "critical", "Drain the node and reset the GPU."),
    XidInfo(109, "Context switch timeout", "warning", "Restart the application."),
    XidInfo(119, "GSP RPC timeout", "critical", "Reset the GPU or reboot the node."),
    XidInfo(120, "GSP error", "critical", "Reset the GPU or reboot the node."),
    XidInfo(
        121,
        "C2C (chip-to-chip) link error",
        "critical",
        "Reset the GPU; service the board if it recurs.",
    ),
    XidInfo(
        136,
        "Memory/firmware error reported after a prior fault",
        "warning",
        "Look at the Xids before it; reset the GPU at the next drain if it recurs.",
    ),
    XidInfo(
        137, "NVLink FLA privilege error", "warning", "Restart the application; check NVLink if it recurs."
    ),
    XidInfo(140, "Unrecovered ECC error", "critical", "Drain the node and reset the GPU."),
    XidInfo(143, "GPU initialization failure", "critical", "Reset the GPU; reboot the node if that fails."),
    XidInfo(
        144,
        "NVLink SAW (system access window) error",
        "critical",
        "Reset the GPU; check NVLink and NVSwitch.",
    ),
    XidInfo(145, "NVLink RLW (receive link) error", "critical", "Reset the GPU; check NVLink and NVSwitch."),
    XidInfo(146, "NVLink TLW (transmit link) error", "critical", "Reset the GPU; check NVLink and NVSwitch."),
    XidInfo(147, "NVLink TREX error", "critical", "Reset the GPU; check NVLink and NVSwitch."),
    XidInfo(148, "NVLink NVLPW control error", "critical", "Reset the GPU; check NVLink and NVSwitch."),
    XidInfo(149, "NVLink NETIR error", "critical", "Reset the GPU; check NVLink, NVSwitch and the fabric."),
    XidInfo(150, "NVLink MSE (management) error", "critical", "Reset the GPU; check NVLink and NVSwitch."),
    XidInfo(
        154,
        "GPU recovery action changed",
        "critical",
        "Do the recovery action the driver names (reset, reboot or drain).",
    ),
)

CATALOG: dict[int, XidInfo] = {row.code: row for row in ROWS}


def xid_info(code: int) -> XidInfo:
    """Catalog entry for a code; unknown codes are treated as warnings, never dropped."""
    return CATALOG.get(
        code, XidInfo(code, "Unknown Xid", "warning", "Look the code up in NVIDIA's Xid catalog.")
    )
