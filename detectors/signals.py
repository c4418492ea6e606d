"""What each known metric means to detection: its signal family and how to read its values.

Fusion votes across families, so a metric's family decides whose vote it is; its kind decides which
detector reads it (a gauge is judged by level, an error counter by how fast it grows).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Family(IntEnum):
    """Signal families: correlated metrics of one family count as one vote in fusion."""

    THERMAL = 0
    POWER = 1
    MEMORY_ECC = 2
    PCIE = 3
    NVLINK = 4
    UTILIZATION = 5
    HOST = 6
    NETWORK = 7
    STORAGE_IO = 8
    LIVENESS = 9
    XID = 10
    # Not in the catalog: a GPU's clock well below its node's other GPUs at the same instant
    # (the peer detector). Data-parallel ranks move together, so this is a fail-slow GPU or stalling
    # firmware, not the job's phase.
    FAIL_SLOW = 11
    # Not in the catalog either: a GPU's temperature creeping above its usual offset from its node's
    # other GPUs (the cooling detector), whatever the load: a failing fan or cold plate.
    COOLING = 12

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


N_FAMILIES = len(Family)

# Families whose movement on many entities at once points at one shared cause worth paging about
# (cooling, a PCIe or NVLink switch, shared storage, the fabric, telemetry itself).
SHARED_CAUSE_FAMILIES = frozenset(
    {Family.THERMAL, Family.PCIE, Family.NVLINK, Family.STORAGE_IO, Family.NETWORK, Family.LIVENESS}
)
# Families whose own error counters rising on a few nodes at once are one stall of a shared server,
# however few nodes that is: a storage server that stalls times out the RPCs of every client using it
# (NFS major timeouts), and on an idle fleet its clients are only the busy nodes (`cluster.py`). Not
# the network: its error counters (drops, receive errors) leak on healthy links now and then.
STALL_FAMILIES = frozenset({Family.STORAGE_IO})
# Families that stay with the GPU that reported them even when its neighbours report too: ECC and
# Xids are per-device hardware facts, never a phase of the job.
PER_DEVICE_FAMILIES = frozenset({Family.MEMORY_ECC, Family.XID})
# Hardware error families: counters that stay flat on healthy parts. Errors growing strongly scrape
# after scrape are a precursor by themselves (SBE storms before a DBE, replay storms before a link drops).
HARD_ERROR_FAMILIES = frozenset({Family.MEMORY_ECC, Family.PCIE, Family.NVLINK})
# Families that may page alone when strongly surprising scrape after scrape: hardware errors ramping,
# a GPU falling behind its peers for a minute on end, and one running hotter than its peers than it
# usually does for half an hour (its evidence is a CUSUM of 5-minute means: it cannot rise in one step).
SUSTAINED_FAMILIES = HARD_ERROR_FAMILIES | {Family.FAIL_SLOW, Family.COOLING}
# Families that read the same sensors: cooling judges a GPU's temperatures against its node's other GPUs
# over five-minute means, the thermal family's gauges judge those temperatures sample by sample (the peer
# detector against the same peers). One GPU running warm is one fact: on an entity they are one vote, the
# stronger, never two (wide-s75, s91: a healthy GPU's half-hour warm wander paged as cooling plus thermal).
SAME_SENSOR_FAMILIES = (Family.THERMAL, Family.COOLING)
# Sustained families whose evidence arrives on some scrapes only, minutes apart (a GPU stalling now and
# then is behind its peers on one scrape in several): their streak outlasts the quiet scrapes between
# while their held evidence has not faded out (`FusionConfig.intermittent_hold`), and once sustained, each
# such scrape holds the score above the firing threshold for a tick or two only, so the lifecycle fires
# them at once (`confirmed`).
INTERMITTENT_FAMILIES = frozenset({Family.FAIL_SLOW})
# How fast a GPU works, in a unit that stays put on idle GPUs (345 MHz): fail-slow reads it. Power is not
# used: idle GPUs spread widely around their peers, and on the simulated week it paged on them.
WORK_RATE_METRICS = frozenset({"DCGM_FI_DEV_SM_CLOCK"})
# A GPU's own (die) temperature: a GPU behind its peers while hotter than them is throttling for heat.
HEAT_METRICS = frozenset({"DCGM_FI_DEV_GPU_TEMP"})
# How much work a GPU does (its power draw, its tensor pipes' busy share): a GPU slowed by heat still does
# its peers' work at a lower clock, one stalling or degrading does less. Fail-slow reads them, in this
# order, to tell the two apart on a GPU that runs hot.
WORK_DONE_METRICS = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
# A GPU's temperatures, die and memory: cooling reads each against its node's other GPUs' same sensor.
TEMPERATURE_METRICS = HEAT_METRICS | {"DCGM_FI_DEV_MEMORY_TEMP"}
# Families that follow the job (how busy, how much power, how loaded the host): strongly correlated with
# each other, so together they are one vote in fusion, never two.
WORKLOAD_FAMILIES = frozenset({Family.UTILIZATION, Family.POWER, Family.HOST})
# Families that follow the load through physics: heat follows power and activity (a node's board
# temperature its CPU load), a node's storage latency follows the I/O it issues itself, TCP retransmits
# grow with the segments sent. Moving the same
# way as one of their load families on the same entity, they are the load's (one workload vote); against
# the load (hotter while power is steady or falling, slower storage or more retransmits while the node
# moves fewer bytes) they are evidence of their own. Error counters (NFS timeouts, link errors) in these
# families are never the load's.
LOAD_COUPLED: dict[Family, tuple[Family, ...]] = {
    Family.THERMAL: (Family.POWER, Family.UTILIZATION, Family.HOST),
    Family.STORAGE_IO: (Family.UTILIZATION, Family.HOST),
    Family.NETWORK: (Family.UTILIZATION,),
}
# Cooling reads a GPU's temperature against its node's other GPUs, and the load moves them all alike, but
# not quite: a GPU drawing more power than its peers warms more than they do when the load rises and
# cools more when it falls, so its offset follows the load level either way. Voting while one of these
# load families moved on the same entity lately, either way, it is the load's vote (as thermal's is); a
# creep sustained alone still pages on its own vote (`Fusion.fused`).
LOAD_COUPLED_EITHER_WAY: dict[Family, tuple[Family, ...]] = {
    Family.COOLING: (Family.POWER, Family.UTILIZATION, Family.HOST),
}
# The load families whose movement says an entity's job itself changed (started, stopped, restarted:
# its CPU and memory taken or given back), not merely that its traffic grew. Storage latency or TCP
# retransmits rising with these on a node are that job's new regime (a job starting on idle nodes
# reads its data, then does more I/O than their idle baselines know, until those learn it): the cluster
# vote leaves such a node out. Traffic alone (NFS bytes, network bytes) explains nothing there: an NFS
# storm begins with a checkpoint's writes.
JOB_COUPLED: dict[Family, tuple[Family, ...]] = {
    Family.STORAGE_IO: (Family.HOST,),
    Family.NETWORK: (Family.HOST,),
}


# Rare hardware events that need action on their own: a row remap pending (the GPU needs a reset), a
# remap that failed or a row remapped for an uncorrectable error (RMA territory). Healthy parts never
# move them, so a rise the fleet does not routinely show pages alone (`Fusion.latch`), however weak
# its statistical surprise; a fleet where one ticks often teaches its error-counter prior so.
DECISIVE_METRICS = frozenset(
    {
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    }
)


# Metrics that fall as the load (or the trouble) grows: memory still available, disk space left. Fusion
# reads every movement as "busier" or "quieter", "worse" or "better", so theirs is read upside down.
FALLS_WITH_LOAD = frozenset({"node_memory_MemAvailable_bytes", "node_filesystem_avail_bytes"})


class Kind(IntEnum):
    """How a series' values are read."""

    IGNORED = 0  # info metrics, bitmasks and labels-only series: never scored
    GAUGE = 1  # a level: judged against its own robust baseline
    COUNTER = 2  # monotonic throughput counter: judged by its rate
    ERROR_COUNTER = 3  # should stay flat: any growth is judged against a Poisson baseline


@dataclass(frozen=True, slots=True)
class SignalSpec:
    family: Family
    kind: Kind


def _specs(family: Family, kind: Kind, *names: str) -> dict[str, SignalSpec]:
    return {name: SignalSpec(family, kind) for name in names}


F, K = Family, Kind
CATALOG: dict[str, SignalSpec] = {
    **_specs(
        F.THERMAL, K.GAUGE, "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "node_hwmon_temp_celsius"
    ),
    # time throttled sits still on a cool GPU and moves in episodes: judged against the fleet's throttling,
    # not its own flat past, where a first throttle was p 1e-12 however often the fleet's GPUs throttle
    **_specs(F.THERMAL, K.ERROR_COUNTER, "DCGM_FI_DEV_THERMAL_VIOLATION"),
    **_specs(F.POWER, K.GAUGE, "DCGM_FI_DEV_POWER_USAGE"),
    **_specs(F.POWER, K.ERROR_COUNTER, "DCGM_FI_DEV_POWER_VIOLATION"),
    **_specs(F.POWER, K.COUNTER, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
    **_specs(
        F.MEMORY_ECC,
        K.ERROR_COUNTER,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
    ),
    **_specs(F.PCIE, K.ERROR_COUNTER, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
    **_specs(F.PCIE, K.GAUGE, "node_pcidevice_current_link_width"),
    **_specs(
        F.NVLINK,
        K.ERROR_COUNTER,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    ),
    **_specs(
        F.UTILIZATION,
        K.GAUGE,
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        # throughput is how busy the job is, not how healthy the link is: link faults show in errors
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ),
    **_specs(
        F.UTILIZATION,
        K.COUNTER,
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_infiniband_port_data_received_bytes_total",
        "node_infiniband_port_data_transmitted_bytes_total",
        "node_mountstats_nfs_operations_requests_total",
        "node_mountstats_nfs_read_bytes_total",
        "node_mountstats_nfs_write_bytes_total",
        "node_disk_read_bytes_total",
        "node_disk_written_bytes_total",
        "node_disk_io_time_seconds_total",  # a busy disk is a busy job; contention shows in PSI io
    ),
    **_specs(
        F.HOST,
        K.GAUGE,
        "node_memory_MemAvailable_bytes",
        "node_load1",
    ),
    **_specs(
        F.HOST,
        K.COUNTER,
        "node_cpu_seconds_total",
        "node_pressure_cpu_waiting_seconds_total",
        "node_pressure_memory_waiting_seconds_total",
        "node_pressure_memory_stalled_seconds_total",
    ),
    **_specs(
        F.HOST,
        K.ERROR_COUNTER,
        "node_edac_correctable_errors_total",
        "node_edac_uncorrectable_errors_total",
        "node_vmstat_oom_kill",
    ),
    **_specs(
        F.NETWORK,
        K.ERROR_COUNTER,
        "node_network_receive_errs_total",
        "node_network_transmit_errs_total",
        "node_network_receive_drop_total",
        "node_network_transmit_drop_total",
        "node_network_carrier_changes_total",
        "node_infiniband_port_errors_received_total",
        "node_infiniband_port_discards_received_total",
        "node_infiniband_port_discards_transmitted_total",
        "node_infiniband_link_downed_total",
        "node_infiniband_link_error_recovery_total",
    ),
    **_specs(F.NETWORK, K.COUNTER, "node_netstat_Tcp_RetransSegs"),
    **_specs(
        F.STORAGE_IO,
        K.COUNTER,
        "node_mountstats_nfs_transport_backlog_queue_total",
        "node_mountstats_nfs_transport_pending_queue_total",
        "node_mountstats_nfs_transport_sending_queue_total",
        "node_mountstats_nfs_operations_queue_time_seconds_total",
        "node_mountstats_nfs_operations_response_time_seconds_total",
        "node_mountstats_nfs_operations_request_time_seconds_total",
        "node_pressure_io_waiting_seconds_total",
        "node_pressure_io_stalled_seconds_total",
    ),
    **_specs(
        F.STORAGE_IO,
        K.ERROR_COUNTER,
        "node_mountstats_nfs_operations_major_timeouts_total",
        "node_nfs_rpc_retransmissions_total",
    ),
    **_specs(F.STORAGE_IO, K.GAUGE, "node_filesystem_avail_bytes"),
    **_specs(F.XID, K.IGNORED, "DCGM_FI_DEV_XID_ERRORS"),
}
del F, K


def spec_for(metric: str) -> SignalSpec | None:
    """The spec of a known metric, or None: unknown metrics are not scored (and are not an error)."""
    return CATALOG.get(metric)
