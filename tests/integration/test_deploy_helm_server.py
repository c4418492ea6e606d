"""`helm install` of helm/prexid on a real kube-apiserver (tests/integration/k8s_apiserver.py), with
default and non-default values: every object the chart makes is accepted server-side (validation,
defaulting, admission), ServiceMonitor and PrometheusRule against prometheus-operator's real CRDs,
registered on that server from its Go module (deploy/tools.py). No pods run: there is no scheduler or
kubelet, so this checks the manifests, not the workload."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from prexid.service.actions.k8s_nodes import api_client
from prexid.service.app.settings import Settings
from tests.integration.k8s_apiserver import ApiServer, helm_install

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import tools  # noqa: E402

pytestmark = pytest.mark.integration

MONITORING = "monitoring.coreos.com"
CUSTOM: dict[str, Any] = {
    "replicaCount": 4,
    "cluster": "b200-east",
    "podDisruptionBudget": {"enabled": False},
    "alertmanagerUrls": ["http://alertmanager-operated:9093"],
    "secretEnv": {"PREXID_ADMIN_TOKEN": "an-admin-token-of-enough-length"},
    "serviceAccount": {"annotations": {"team": "gpu-sre"}},
    "quarantine": {
        "enabled": True,
        "dryRun": False,
        "kinds": ["xid", "pre_xid"],
        "severities": ["critical", "warning"],
        "maxNodes": 5,
        "maxFraction": 0.1,
        "healthyPeriodSeconds": 3600,
    },
}


@pytest.fixture(scope="module")
def api(k8s: ApiServer) -> Iterator[client.ApiClient]:
    """The test's client, with prometheus-operator's ServiceMonitor and PrometheusRule CRDs registered."""
    api = api_client(k8s.kubeconfig)
    ext = client.ApiextensionsV1Api(api)
    try:
        files = tools.crd_files()
    except tools.ToolError as err:
        pytest.fail(f"could not fetch prometheus-operator CRDs: {err}")
    names = []
    for path in files:
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:  # registered by an earlier module of the session
                raise
    deadline = time.monotonic() + 60
    for name in names:
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(name).status.conditions or []
        ):
            assert time.monotonic() < deadline, f"CRD {name} not established"
            time.sleep(0.2)
    yield api
    api.close()


def test_a_server_side_dry_run_of_the_defaults_is_accepted_and_keeps_nothing(
    helm: Path, k8s: ApiServer, api: client.ApiClient
) -> None:
    out = helm_install(helm, k8s, "dry", "prexid-dry", dry_run=True)
    assert "kind: Deployment" in out and "kind: PrometheusRule" in out and "kind: ServiceMonitor" in out
    with pytest.raises(ApiException) as gone:
        client.AppsV1Api(api).read_namespaced_deployment("dry-prexid", "prexid-dry")
    assert gone.value.status == 404


def test_the_defaults_install_every_object_and_no_rbac(
    helm: Path, k8s: ApiServer, api: client.ApiClient
) -> None:
    helm_install(helm, k8s, "def", "prexid-def")
    name, ns = "def-prexid", "prexid-def"
    deployment = client.AppsV1Api(api).read_namespaced_deployment(name, ns)
    assert deployment.spec.replicas == 2
    assert deployment.spec.template.spec.automount_service_account_token is False
    core = client.CoreV1Api(api)
    assert "PREXID_QUARANTINE__ENABLED" not in core.read_namespaced_config_map(f"{name}-env", ns).data
    assert core.read_namespaced_service(name, ns).spec.ports[0].port == 8000
    assert client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(name, ns).spec.max_unavailable == 1
    custom = client.CustomObjectsApi(api)
    for plural in ("servicemonitors", "prometheusrules"):
        listed = custom.list_namespaced_custom_object(MONITORING, "v1", ns, plural)["items"]
        assert [o["metadata"]["name"] for o in listed] == [name], plural
    roles = client.RbacAuthorizationV1Api(api).list_cluster_role(
        label_selector="app.kubernetes.io/instance=def"
    )
    assert roles.items == []  # quarantine off: no rights asked for


def test_quarantine_values_install_its_role_and_settings_prexid_accepts(
    helm: Path, k8s: ApiServer, api: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    helm_install(helm, k8s, "cus", "prexid-cus", values=CUSTOM)
    name, ns = "cus-prexid", "prexid-cus"
    deployment = client.AppsV1Api(api).read_namespaced_deployment(name, ns)
    assert deployment.spec.replicas == 4
    assert deployment.spec.template.spec.automount_service_account_token is True  # the client needs it
    rbac = client.RbacAuthorizationV1Api(api)
    role = rbac.read_cluster_role(f"{name}-quarantine")
    assert sorted((r.resources[0], tuple(r.verbs)) for r in role.rules) == [
        ("events", ("create",)),
        ("nodes", ("get", "patch")),
        ("nodes/status", ("patch",)),
    ]
    binding = rbac.read_cluster_role_binding(f"{name}-quarantine")
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", name, ns)]
    with pytest.raises(ApiException):
        client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(name, ns)

    env = client.CoreV1Api(api).read_namespaced_config_map(f"{name}-env", ns).data
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    q = Settings().quarantine  # what the pod would run with
    assert (q.enabled, q.dry_run, q.kinds, q.severities) == (
        True,
        False,
        ["xid", "pre_xid"],
        ["critical", "warning"],
    )
    assert (q.max_nodes, q.max_fraction, q.healthy_period_s) == (5, 0.1, 3600.0)
