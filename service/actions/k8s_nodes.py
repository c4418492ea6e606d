"""The Kubernetes backend of the quarantine action, with the official `kubernetes` client (`prexid[k8s]`).

A quarantine is, on the Node: cordon (`spec.unschedulable`) and a `NoSchedule` taint in one patch
(guarded by the node's resourceVersion, so a concurrent writer's taints are not lost), then a
NodeCondition holding the evidence, then an Event. Undo takes the taint off, uncordons the node only
if prexid cordoned it, flips the condition to False and records who undid it in an annotation and an
Event. RBAC needed (helm/prexid's ClusterRole): nodes get/patch, nodes/status patch, events create.
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from prexid.service.actions.quarantine import ActionError, Order, Retrying
from prexid.service.schemas import rfc3339

ANNOTATION = "prexid.io/quarantine"  # the alert that quarantined the node, and when
CORDONED = "prexid.io/cordoned"  # "true" when prexid set unschedulable (a human's cordon is left alone)
UNDONE_BY = "prexid.io/undone-by"
EVENT_NAMESPACE = "default"  # where the kubelet writes node events too
MERGE = "application/merge-patch+json"  # lists (taints) replaced whole; null deletes a key
STRATEGIC = "application/strategic-merge-patch+json"  # conditions merged by type
MAX_MESSAGE = 1024
RETRYABLE = {409, 429, 500, 502, 503, 504}


def k8s_time(ts: float) -> str:
    """RFC3339 to the second, as metav1.Time writes it."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """A client from a kubeconfig file, or from the pod's service account when None. No retries of its
    own: the action retries with backoff and counts each failure."""
    cfg = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=cfg, persist_config=False
            )
    except (config.ConfigException, OSError) as err:  # at start, one line: not a traceback at the first page
        where = kubeconfig or "the pod's service account (outside a pod, set quarantine.kubeconfig)"
        raise SystemExit(f"prexid: quarantine: no Kubernetes credentials from {where}: {err}") from None
    cfg.retries = 0
    return client.ApiClient(cfg)


def _error(err: Exception, what: str) -> ActionError:
    if isinstance(err, ApiException):
        status = int(err.status or 0)
        return ActionError(f"{what}: HTTP {status} {err.reason}", retry=status in RETRYABLE)
    return ActionError(f"{what}: {type(err).__name__}: {err}")


class KubernetesNodes:
    def __init__(
        self,
        api: client.ApiClient,
        taint_key: str,
        condition_type: str,
        timeout_s: float,
        clock: Any = time.time,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.taint_key = taint_key
        self.condition_type = condition_type
        self.timeout_s = timeout_s
        self.clock = clock
        self.instance = socket.gethostname()

    def _do(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.timeout_s, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            raise _error(err, what) from err

    def _taints_without_ours(self, node: Any) -> list[dict[str, Any]]:
        kept = [t.to_dict(serialize=True) for t in node.spec.taints or [] if not self._ours(t)]
        return [{k: v for k, v in t.items() if v is not None} for t in kept]  # as the API server wrote them

    def _ours(self, taint: Any) -> bool:
        return bool(taint.key == self.taint_key and taint.effect == "NoSchedule")

    def quarantine(self, order: Order, retrying: Retrying) -> float | None:
        name = order.node
        node = retrying(f"cordon {name}", lambda: self._cordon(order))  # get + patch: a 409 gets again
        if node is None:
            return None  # a re-sent alert (a takeover, a restart): done already, nothing to write
        cordoned_at = float(self.clock())
        retrying(
            f"condition on {name}", lambda: self._condition(name, "True", "PrexidQuarantined", order.evidence)
        )
        message = f"cordoned and tainted by prexid: {order.evidence}"
        retrying(f"event on {name}", lambda: self._event(node, "Warning", "PrexidQuarantined", message))
        return cordoned_at

    def _cordon(self, order: Order) -> Any:
        """Cordon and taint in one patch guarded by the node's resourceVersion; the node as read, or
        None if this alert had quarantined it already."""
        node = self._do(f"get node {order.node}", self.core.read_node, order.node)
        annotations = node.metadata.annotations or {}
        if self._holds(node, order):
            return None
        cordoned = "true" if not node.spec.unschedulable or annotations.get(CORDONED) == "true" else None
        taint = {"key": self.taint_key, "value": order.kind, "effect": "NoSchedule"}
        patch = {
            "metadata": {
                "resourceVersion": node.metadata.resource_version,  # 409 if someone wrote in between
                "annotations": {
                    ANNOTATION: f"{order.kind} alert {order.fingerprint} at {rfc3339(self.clock())}",
                    CORDONED: cordoned,
                    UNDONE_BY: None,
                },
            },
            "spec": {"unschedulable": True, "taints": [*self._taints_without_ours(node), taint]},
        }
        self._do(f"cordon {order.node}", self.core.patch_node, order.node, patch, _content_type=MERGE)
        return node

    def _holds(self, node: Any, order: Order) -> bool:
        annotations = node.metadata.annotations or {}
        tainted = any(self._ours(t) for t in node.spec.taints or [])
        marked = str(annotations.get(ANNOTATION, "")).startswith(f"{order.kind} alert {order.fingerprint} ")
        return tainted and marked and bool(node.spec.unschedulable)

    def release(self, name: str, who: str, retrying: Retrying) -> None:
        node = retrying(f"release {name}", lambda: self._release(name, who))
        retrying(
            f"condition on {name}",
            lambda: self._condition(name, "False", "PrexidQuarantineUndone", f"undone by {who}"),
        )
        retrying(
            f"event on {name}",
            lambda: self._event(node, "Normal", "PrexidQuarantineUndone", f"quarantine undone by {who}"),
        )

    def _release(self, name: str, who: str) -> Any:
        """Untaint (and uncordon, if prexid cordoned it) in one patch guarded by the resourceVersion."""
        node = self._do(f"get node {name}", self.core.read_node, name)
        annotations = node.metadata.annotations or {}
        spec: dict[str, Any] = {"taints": self._taints_without_ours(node)}
        if annotations.get(CORDONED) == "true":
            spec["unschedulable"] = False
        patch = {
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {UNDONE_BY: f"{who} at {rfc3339(self.clock())}", CORDONED: None},
            },
            "spec": spec,
        }
        self._do(f"release {name}", self.core.patch_node, name, patch, _content_type=MERGE)
        return node

    def _condition(self, node: str, status: str, reason: str, message: str) -> None:
        now = k8s_time(self.clock())
        cond = {
            "type": self.condition_type,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        body = {"status": {"conditions": [cond]}}
        self._do(f"set condition on {node}", self.core.patch_node_status, node, body, _content_type=STRATEGIC)

    def _event(self, node: Any, kind: str, reason: str, message: str) -> None:
        name = node.metadata.name
        now = k8s_time(self.clock())
        body = {
            "metadata": {"generateName": f"{name}.prexid-", "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid},
            "type": kind,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "source": {"component": "prexid"},
            "reportingComponent": "prexid.io/quarantine",
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._do(f"event on {name}", self.core.create_namespaced_event, EVENT_NAMESPACE, body)
