"""The Helm chart: `helm lint --strict`, its rendered manifests validated against Kubernetes' schemas
(kubernetes-validate) and prometheus-operator's CRD schemas (its Go module), and its wiring checked
against what prexid reads. helm and the CRDs come from deploy/tools.py (built once, cached)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from prexid.service.app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm/prexid"
K8S_VERSION = "1.33.0"

sys.path.insert(0, str(ROOT / "deploy"))
import tools  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crds() -> dict[str, dict[str, Any]]:
    try:
        return tools.crd_schemas()
    except tools.ToolError as err:
        pytest.fail(f"could not fetch prometheus-operator CRDs: {err}")


def render(helm: Path, *sets: str, values: Path | None = None) -> list[dict[str, Any]]:
    args = [str(helm), "template", "r", str(CHART), *[a for s in sets for a in ("--set", s)]]
    args += ["--values", str(values)] if values else []
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def test_helm_lint_strict_passes(helm: Path) -> None:
    run = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("replicaCount=4", "podDisruptionBudget.enabled=false", "secretEnv.PREXID_GROUP_ID=other"),
        ("serviceMonitor.enabled=false", "prometheusRule.enabled=false", "grafanaDashboard.enabled=false"),
        ("quarantine.enabled=true", "quarantine.dryRun=false", "quarantine.healthyPeriodSeconds=600"),
    ],
)
def test_rendered_manifests_validate_against_kubernetes_and_operator_schemas(
    helm: Path, crds: dict[str, dict[str, Any]], sets: tuple[str, ...]
) -> None:
    for doc in render(helm, *sets):
        key = f"{doc['apiVersion']}/{doc['kind']}"
        if key in crds:
            jsonschema.validate(doc, crds[key], cls=jsonschema.Draft7Validator)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_schema_violation_is_caught(crds: dict[str, dict[str, Any]]) -> None:
    """Guards the test above: both validators reject what Kubernetes would."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": "http"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad_sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "spec": {"endpoints": "x"}}
    schema = crds["monitoring.coreos.com/v1/ServiceMonitor"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_sm, schema, cls=jsonschema.Draft7Validator)


# What a real cluster sets: a private registry, a Strimzi Kafka with its own CA, placement, annotations.
PRIVATE_VALUES: dict[str, Any] = {
    "image": {"repository": "registry.example.com/ml/prexid", "tag": "0.1.0-abc", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "serviceAccount": {"create": True, "name": "prexid-sa", "annotations": {"team": "sre"}},
    "podAnnotations": {"example.com/owner": "sre"},
    "podLabels": {"team": "sre"},
    "nodeSelector": {"node-role.kubernetes.io/infra": ""},
    "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "prexid"}},
                    },
                }
            ]
        }
    },
    "extraEnv": {
        "PREXID_KAFKA_SECURITY__PROTOCOL": "SSL",
        "PREXID_KAFKA_SECURITY__SSL_CAFILE": "/etc/kafka-ca/ca.crt",
    },
    "extraVolumes": [{"name": "kafka-ca", "secret": {"secretName": "my-cluster-cluster-ca-cert"}}],
    "extraVolumeMounts": [{"name": "kafka-ca", "mountPath": "/etc/kafka-ca", "readOnly": True}],
}


@pytest.fixture(scope="module")
def private(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    values = tmp_path_factory.mktemp("helm") / "values.yaml"
    values.write_text(yaml.safe_dump(PRIVATE_VALUES))
    return render(helm, values=values)


def test_private_registry_and_kafka_ca_values_render_manifests_kubernetes_accepts(
    private: list[dict[str, Any]], crds: dict[str, dict[str, Any]]
) -> None:
    for doc in private:
        key = f"{doc['apiVersion']}/{doc['kind']}"
        if key in crds:
            jsonschema.validate(doc, crds[key], cls=jsonschema.Draft7Validator)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    docs = by_kind(private)
    template = docs["Deployment"][0]["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/ml/prexid:0.1.0-abc"
    assert container["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (account,) = docs["ServiceAccount"]
    assert pod["serviceAccountName"] == account["metadata"]["name"] == "prexid-sa"
    assert account["metadata"]["annotations"] == {"team": "sre"}
    assert template["metadata"]["annotations"]["example.com/owner"] == "sre"
    assert template["metadata"]["labels"]["team"] == "sre"
    assert pod["nodeSelector"] == PRIVATE_VALUES["nodeSelector"]
    assert (
        pod["tolerations"] == PRIVATE_VALUES["tolerations"] and pod["affinity"] == PRIVATE_VALUES["affinity"]
    )
    # the CA file prexid is told to read is on a mounted volume
    env = next(c for c in docs["ConfigMap"] if c["metadata"]["name"].endswith("-env"))
    cafile = str(settings_from(env).kafka_security.ssl_cafile)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert cafile.startswith(mounts["kafka-ca"] + "/")
    assert {"name": "kafka-ca", "secret": {"secretName": "my-cluster-cluster-ca-cert"}} in pod["volumes"]


def test_an_existing_service_account_is_used_not_created(helm: Path) -> None:
    docs = by_kind(render(helm, "serviceAccount.create=false", "serviceAccount.name=shared"))
    assert "ServiceAccount" not in docs
    assert docs["Deployment"][0]["spec"]["template"]["spec"]["serviceAccountName"] == "shared"


def _leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if (
            isinstance(value, dict)
            and value
            and key not in ("resources", "podSecurityContext", "securityContext")
        ):
            out += _leaf_keys(value, path + ".")
        else:
            out.append(path)
    return out


def test_the_chart_readme_documents_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    table = (CHART / "README.md").read_text()
    missing = [k for k in _leaf_keys(values) if f"| `{k}` |" not in table]
    assert not missing, f"helm/prexid/README.md lacks rows for {missing}"


def test_the_chart_renders_every_part_the_service_needs(helm: Path) -> None:
    kinds = {k: len(v) for k, v in by_kind(render(helm)).items()}
    assert kinds == {
        "ConfigMap": 2,  # settings and the Grafana dashboard
        "Deployment": 1,
        "Service": 2,  # a replica's own view, and the fleet view
        "ServiceAccount": 1,
        "PodDisruptionBudget": 1,
        "ServiceMonitor": 1,
        "PrometheusRule": 1,
    }


@pytest.fixture(scope="module")
def default(helm: Path) -> dict[str, list[dict[str, Any]]]:
    return by_kind(render(helm, "replicaCount=3"))


def settings_from(configmap: dict[str, Any]) -> Settings:
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("PREXID_")]:
            mp.delenv(key)
        for key, value in configmap["data"].items():
            mp.setenv(key, value)
        return Settings()


def test_settings_built_from_the_configmap_listen_where_probes_service_and_monitor_look(
    default: dict[str, list[dict[str, Any]]],
) -> None:
    env = next(c for c in default["ConfigMap"] if c["metadata"]["name"].endswith("-env"))
    assert all(k.removeprefix("PREXID_").lower() in Settings.model_fields for k in env["data"])
    settings = settings_from(env)
    assert settings.http_host == "0.0.0.0"
    assert settings.metrics_topics == ["prexid.metrics"] and settings.logs_topics == ["prexid.kernel-logs"]
    (deploy,) = default["Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["ports"] == [
        {"name": "http", "containerPort": settings.http_port, "protocol": "TCP"},
        {"name": "fleet", "containerPort": settings.fleet_http_port, "protocol": "TCP"},
    ]
    assert settings.fleet_vote and settings.fleet_http_port != settings.http_port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    service, fleet = sorted(default["Service"], key=lambda svc: svc["metadata"]["name"])
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert fleet["metadata"]["name"].endswith("-fleet") and fleet["spec"]["ports"][0]["targetPort"] == "fleet"
    (monitor,) = default["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert {"targetLabel": "job", "replacement": "prexid", "action": "replace"} in monitor["spec"][
        "endpoints"
    ][0]["relabelings"]


def test_alertmanager_urls_reach_prexid_settings(helm: Path) -> None:
    docs = by_kind(
        render(helm, "alertmanagerUrls[0]=http://am-0:9093", "alertmanagerUrls[1]=http://am-1:9093")
    )
    env = next(c for c in docs["ConfigMap"] if c["metadata"]["name"].endswith("-env"))
    assert settings_from(env).alertmanager_urls == ["http://am-0:9093", "http://am-1:9093"]


def test_selectors_of_service_monitor_and_pdb_match_the_pods(
    default: dict[str, list[dict[str, Any]]],
) -> None:
    (deploy,) = default["Deployment"]
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["replicas"] == 3
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for service in default["Service"]:
        assert service["spec"]["selector"].items() <= pod_labels.items()
    (pdb,) = default["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (monitor,) = default["ServiceMonitor"]
    own = next(svc for svc in default["Service"] if not svc["metadata"]["name"].endswith("-fleet"))
    assert monitor["spec"]["selector"]["matchLabels"].items() <= own["metadata"]["labels"].items()


def test_the_prometheus_rule_is_the_plain_rules_file_with_the_configured_runbook_base(helm: Path) -> None:
    plain = yaml.safe_load((ROOT / "deploy/prometheus/rules.yml").read_text())
    (rule,) = by_kind(render(helm))["PrometheusRule"]
    assert rule["spec"] == plain
    (moved,) = by_kind(render(helm, "runbookBaseUrl=https://wiki.test/prexid/"))["PrometheusRule"]
    urls = [r["annotations"]["runbook_url"] for g in moved["spec"]["groups"] for r in g["rules"]]
    assert urls and all(u.startswith("https://wiki.test/prexid/") and u.endswith(".md") for u in urls)


def test_the_dashboard_configmap_carries_the_grafana_dashboard(
    default: dict[str, list[dict[str, Any]]],
) -> None:
    board = next(c for c in default["ConfigMap"] if c["metadata"]["name"].endswith("-dashboard"))
    assert json.loads(board["data"]["prexid.json"]) == json.loads(
        (ROOT / "deploy/grafana/prexid.json").read_text()
    )
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_secret_settings_go_to_a_secret_the_pods_read(helm: Path) -> None:
    docs = by_kind(render(helm, "secretEnv.PREXID_KAFKA_BOOTSTRAP=secret-kafka:9093"))
    (secret,) = docs["Secret"]
    assert secret["stringData"] == {"PREXID_KAFKA_BOOTSTRAP": "secret-kafka:9093"}
    refs = docs["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in refs


@pytest.mark.parametrize(
    "bad", ["replicaCount=0", "http.port=70000", "kafka.bootstrap=no-port", "runbookBaseUrl=wiki", "typo=1"]
)
def test_values_schema_rejects_bad_values(helm: Path, bad: str) -> None:
    run = subprocess.run(
        [str(helm), "template", "r", str(CHART), "--set", bad], capture_output=True, text=True
    )
    assert run.returncode != 0 and "schema" in run.stderr


def test_the_fleet_view_is_served_and_exposed_only_with_its_port(helm: Path) -> None:
    docs = by_kind(render(helm, "http.fleetPort=null"))
    assert [s["metadata"]["name"] for s in docs["Service"]] == ["r-prexid"]
    env = next(c for c in docs["ConfigMap"] if c["metadata"]["name"].endswith("-env"))
    assert settings_from(env).fleet_http_port is None
    (deploy,) = docs["Deployment"]
    assert [p["name"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["http"]
