"""A real kube-apiserver over a real etcd, on 127.0.0.1 free ports, for the quarantine and Helm tests.

Both are built from the Go module proxy by deploy/k8s/build.sh (cached in deploy/k8s/.cache/bin; cold,
minutes). The API server serves a self-signed certificate (`--cert-dir`), authenticates one static
token of `system:masters` and authorises with RBAC, so a ServiceAccount token gets exactly what the
chart's ClusterRole grants.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.integration.kafka_broker import free_ports

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy/k8s/build.sh"
BUILD_TIMEOUT_S = 2400  # cold: module downloads and a 170 MB link on 2 shared cores
READY_TIMEOUT_S = 120


class ApiServerError(RuntimeError):
    pass


@dataclass
class ApiServer:
    url: str
    token: str
    ca_file: Path
    kubeconfig: Path
    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kubeconfig_for(self, token: str, path: Path) -> Path:
        """A kubeconfig for another identity (a ServiceAccount's token) on this server."""
        write_kubeconfig(path, self.url, self.ca_file, token)
        return path

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def build() -> Path:
    """The bin dir holding etcd and kube-apiserver, built if missing."""
    run = subprocess.run(
        ["bash", str(BUILD), "--print-dir"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    if run.returncode != 0:
        raise ApiServerError(f"deploy/k8s/build.sh failed:\n{run.stderr[-4000:]}")
    return Path(run.stdout.strip().splitlines()[-1])


def write_kubeconfig(path: Path, url: str, ca_file: Path, token: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)


def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait(check: str, url: str, proc: subprocess.Popen[bytes], **kw: object) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ApiServerError(f"{check} exited with {proc.returncode}")
        try:
            resp = httpx.get(url, timeout=2.0, **kw)  # type: ignore[arg-type]
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}: {resp.text[:300]}"
        except httpx.HTTPError as err:
            last = repr(err)
        time.sleep(0.3)
    raise ApiServerError(f"{check} not ready after {READY_TIMEOUT_S} s: {last}")


def start(workdir: Path, token: str = "prexid-test-admin-token-0123456789") -> ApiServer:
    """etcd, then kube-apiserver on free loopback ports; returns once /readyz answers 200."""
    bins = build()
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ApiServerError("openssl not found (Debian package openssl): it makes the service-account key")
    workdir.mkdir(parents=True, exist_ok=True)
    etcd_port, peer_port, api_port = free_ports(3)
    server = ApiServer(
        url=f"https://127.0.0.1:{api_port}",  # in the self-signed certificate's names
        token=token,
        ca_file=workdir / "certs/apiserver.crt",
        kubeconfig=workdir / "kubeconfig",
        workdir=workdir,
    )
    try:
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        etcd = _spawn(
            [
                str(bins / "etcd"),
                "--name=test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--unsafe-no-fsync",  # a test store: nothing to keep across a crash
                "--log-level=warn",
            ],
            workdir / "etcd.log",
        )
        server.procs.append(etcd)
        _wait("etcd", f"{etcd_url}/health", etcd)
        sa_key, sa_pub = workdir / "sa.key", workdir / "sa.pub"
        subprocess.run([openssl, "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(
            [openssl, "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
            check=True,
            capture_output=True,
        )
        tokens = workdir / "tokens.csv"
        tokens.write_text(f'{token},admin,admin-uid,"system:masters"\n')
        api = _spawn(
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--token-auth-file={tokens}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--authorization-mode=RBAC",
            ],
            workdir / "kube-apiserver.log",
        )
        server.procs.append(api)
        _wait_cert(server.ca_file, api)
        ctx = ssl.create_default_context(cafile=str(server.ca_file))
        _wait(
            "kube-apiserver",
            f"{server.url}/readyz",
            api,
            verify=ctx,
            headers={"Authorization": f"Bearer {token}"},
        )
        write_kubeconfig(server.kubeconfig, server.url, server.ca_file, token)
    except BaseException as err:
        server.stop()
        if isinstance(err, ApiServerError):
            raise ApiServerError(
                f"{err}\n--- kube-apiserver log ---\n{server.log_tail('kube-apiserver')}"
            ) from None
        raise
    return server


def _wait_cert(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (path.exists() and path.stat().st_size > 0):
        if proc.poll() is not None:
            raise ApiServerError(f"kube-apiserver exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise ApiServerError("kube-apiserver wrote no serving certificate")
        time.sleep(0.2)


@contextlib.contextmanager
def running(workdir: Path) -> Iterator[ApiServer]:
    server = start(workdir)
    try:
        yield server
    finally:
        server.stop()


def helm_install(
    helm: Path,
    server: ApiServer,
    release: str,
    namespace: str,
    *sets: str,
    values: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> str:
    """`helm install` of helm/prexid on `server` (a real install; `dry_run`: `--dry-run=server`, every
    object sent to the API server for validation and admission, none kept). `values` go in a values
    file (typed: `--set` makes 0.1 a string). Returns helm's output."""
    args = [str(helm), "install", release, str(ROOT / "helm/prexid"), "--kubeconfig", str(server.kubeconfig)]
    args += ["--namespace", namespace, "--create-namespace", *[a for s in sets for a in ("--set", s)]]
    args += ["--dry-run=server"] if dry_run else []
    if values is not None:
        path = server.workdir / f"values-{release}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise AssertionError(f"helm install {release} failed:\n{run.stderr}")
    return run.stdout
