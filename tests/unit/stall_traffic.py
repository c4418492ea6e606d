"""A cluster-wide NFS storage stall, scrape by scrape: the traffic the fleet-vote tests share.

Each node exports an NFS backlog counter, bytes read, TCP retransmits, its load and one GPU's
temperature. In the stall every node's backlog grows 20x and its retransmits jump (the NFS server's
RPC slots saturated): two families voting on every node at once, so a node judged without the rest
of the cluster pages, and one judged with it is held back under one `cluster` alert.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from prexid.service.decode.types import RawSample

START = 1_796_205_600.0
STEP_S = 15.0


def node_name(n: int) -> str:
    return f"node-{n:02d}"


def stall_scrapes(nodes: int, ticks: int, stalled: range, seed: int = 5) -> Iterator[list[RawSample]]:
    """One list of samples per 15 s scrape of the whole cluster; every node stalls during `stalled`."""
    rng = np.random.default_rng(seed)
    backlog, read, retrans = np.zeros(nodes), np.zeros(nodes), np.zeros(nodes)
    for t in range(ticks):
        ts = START + STEP_S * t
        stall = t in stalled
        out: list[RawSample] = []
        for n in range(nodes):
            backlog[n] += rng.poisson((900.0 if stall else 40.0) * STEP_S)
            read[n] += 2e7 * STEP_S * (1 + rng.normal(0, 0.02))
            retrans[n] += rng.poisson(400.0 if stall else 2.0)
            host = {"instance": f"{node_name(n)}:9100"}
            nfs = {**host, "export": "nfs:/ckpt"}
            out.append(
                RawSample("node_mountstats_nfs_transport_backlog_queue_total", nfs, ts, float(backlog[n]))
            )
            out.append(RawSample("node_mountstats_nfs_read_bytes_total", nfs, ts, float(read[n])))
            out.append(RawSample("node_netstat_Tcp_RetransSegs", host, ts, float(retrans[n])))
            out.append(RawSample("node_load1", host, ts, 20.0 + rng.normal()))
            gpu = {"Hostname": node_name(n), "gpu": "0", "pci_bus_id": "00000000:18:00.0"}
            out.append(RawSample("DCGM_FI_DEV_GPU_TEMP", gpu, ts, 60.0 + rng.normal(0, 0.3)))
        yield out


def node_of(sample: RawSample) -> str:
    return sample.labels.get("Hostname") or sample.labels["instance"].split(":")[0]
