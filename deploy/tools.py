#!/usr/bin/env python3
"""Offline-checkable deploy tooling, fetched once from package registries into git-ignored `deploy/.cache/`:

- `helm` v3, built from its Go module (`go install helm.sh/helm/v3/cmd/helm@HELM_VERSION`);
- prometheus-operator's CRDs (ServiceMonitor, PrometheusRule) with their openAPIV3Schema, from the
  `github.com/prometheus-operator/prometheus-operator` Go module, to validate the chart's manifests (and
  their manifests, registered on the real API server the chart is installed into).

Kubernetes' own schemas come from the `kubernetes-validate` PyPI package. Usage: `deploy/tools.py helm|crds`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "deploy/.cache"
HELM_VERSION = "v3.22.0"
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
CRD_FILES = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


class ToolError(RuntimeError):
    pass


def _go(*args: str, env: dict[str, str] | None = None) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise ToolError("the Go toolchain is needed to build helm and fetch CRDs (go not found)")
    run = subprocess.run(
        [go, *args], capture_output=True, text=True, env={**os.environ, "GOTOOLCHAIN": "local", **(env or {})}
    )
    if run.returncode != 0:
        raise ToolError(f"go {' '.join(args)} failed:\n{run.stderr[-4000:]}")
    return run.stdout


def helm() -> Path:
    """Path to helm HELM_VERSION, building it on first use (a few minutes; then cached)."""
    exe = CACHE / f"helm-{HELM_VERSION}" / "helm"
    if not exe.exists():
        _go(
            "install",
            f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
            env={"GOBIN": str(exe.parent), "CGO_ENABLED": "0"},
        )
    return exe


def python_patterns(schema: Any) -> Any:
    """Go's RE2 allows flags like `(?i)` mid-pattern (`^(?i)(abort|warn)?$`); Python's re needs them first."""
    if isinstance(schema, dict):
        out = {k: python_patterns(v) for k, v in schema.items()}
        pattern = out.get("pattern")
        if isinstance(pattern, str) and "(?i)" in pattern[1:]:
            out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
        return out
    if isinstance(schema, list):
        return [python_patterns(v) for v in schema]
    return schema


def crd_files() -> list[Path]:
    """prometheus-operator's ServiceMonitor and PrometheusRule CRD manifests, to register on a real API
    server (tests/integration/test_deploy_helm_server.py)."""
    info = json.loads(_go("mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"))
    return [Path(info["Dir"]) / "example/prometheus-operator-crd" / name for name in CRD_FILES.values()]


def crd_schemas() -> dict[str, dict[str, Any]]:
    """openAPIV3Schema of each CRD kind's served storage version, keyed by `apiVersion/kind`."""
    cached = CACHE / f"crd-schemas-{OPERATOR_VERSION}-v2.json"
    if not cached.exists():
        info = json.loads(_go("mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"))
        crd_dir = Path(info["Dir"]) / "example/prometheus-operator-crd"
        schemas = {}
        for kind, name in CRD_FILES.items():
            crd = yaml.safe_load((crd_dir / name).read_text())
            for version in crd["spec"]["versions"]:
                key = f"{crd['spec']['group']}/{version['name']}/{kind}"
                schemas[key] = python_patterns(version["schema"]["openAPIV3Schema"])
        CACHE.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(schemas))
    return dict(json.loads(cached.read_text()))


def main(argv: list[str]) -> int:
    if argv == ["helm"]:
        print(helm())
    elif argv == ["crds"]:
        print("\n".join(crd_schemas()))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
