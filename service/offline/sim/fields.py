"""The simulated field set: DCGM fields per GPU and node-exporter families per node, in output order.

Each field is (metric name, extra labels). The values of one scrape are one float64 vector: every GPU
field over nodes x GPUs (row-major), then every node field over nodes; NaN means "not scraped".
"""

from __future__ import annotations

from prexid.service.offline.sim.wire import gpu_labels, node_labels

GPU_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS",
)

_IB = {"device": "mlx5_0", "port": "1"}
_ETH = {"device": "eth0"}
_NFS = {"export": "storage:/checkpoints", "mountaddr": "10.0.0.2", "protocol": "tcp"}
_NFS_W = {**_NFS, "operation": "WRITE"}
_DISK = {"device": "nvme0n1"}
NODE_FIELDS: tuple[tuple[str, dict[str, str]], ...] = (
    ("node_cpu_seconds_total", {"cpu": "all", "mode": "user"}),
    ("node_load1", {}),
    ("node_memory_MemAvailable_bytes", {}),
    ("node_pressure_cpu_waiting_seconds_total", {}),
    ("node_pressure_memory_waiting_seconds_total", {}),
    ("node_pressure_io_waiting_seconds_total", {}),
    ("node_pressure_io_stalled_seconds_total", {}),
    ("node_infiniband_port_data_received_bytes_total", _IB),
    ("node_infiniband_port_data_transmitted_bytes_total", _IB),
    ("node_infiniband_port_errors_received_total", _IB),
    ("node_infiniband_link_downed_total", _IB),
    ("node_infiniband_link_error_recovery_total", _IB),
    ("node_network_receive_bytes_total", _ETH),
    ("node_network_transmit_bytes_total", _ETH),
    ("node_network_receive_errs_total", _ETH),
    ("node_network_receive_drop_total", _ETH),
    ("node_netstat_Tcp_RetransSegs", {}),
    ("node_mountstats_nfs_transport_backlog_queue_total", _NFS),
    ("node_mountstats_nfs_transport_pending_queue_total", _NFS),
    ("node_mountstats_nfs_operations_requests_total", _NFS_W),
    ("node_mountstats_nfs_operations_queue_time_seconds_total", _NFS_W),
    ("node_mountstats_nfs_operations_response_time_seconds_total", _NFS_W),
    ("node_mountstats_nfs_operations_major_timeouts_total", _NFS_W),
    ("node_mountstats_nfs_write_bytes_total", _NFS),
    ("node_mountstats_nfs_read_bytes_total", _NFS),
    ("node_disk_read_bytes_total", _DISK),
    ("node_disk_written_bytes_total", _DISK),
    ("node_disk_io_time_seconds_total", _DISK),
    ("node_hwmon_temp_celsius", {"chip": "platform_coretemp_0", "sensor": "temp1"}),
    ("node_edac_correctable_errors_total", {"controller": "0"}),
)


def series_table(nodes: int, gpus: int, model: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every column of a scrape vector, in the engine's output order."""
    out: list[tuple[str, dict[str, str]]] = []
    for name in GPU_FIELDS:
        out += [(name, gpu_labels(n, g, model)) for n in range(nodes) for g in range(gpus)]
    for name, extra in NODE_FIELDS:
        out += [(name, node_labels(n, **extra)) for n in range(nodes)]
    return out
