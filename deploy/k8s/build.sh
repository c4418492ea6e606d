#!/usr/bin/env bash
# Build a real kube-apiserver and etcd from the Go module proxy into deploy/k8s/.cache/bin (gitignored),
# for the quarantine tests (tests/integration/k8s_apiserver.py) and local trials. Idempotent: a marker
# per wrapper module's go.mod + go.sum + Go version makes later runs return at once; concurrent runs
# (parallel test sessions) wait on one lock. Cold, it takes minutes (kube-apiserver is ~170 MB).
#
# Usage: deploy/k8s/build.sh [--print-dir]     prints nothing but the bin dir with --print-dir
# Environment: K8S_CACHE_DIR (default deploy/k8s/.cache), GO (default: go on PATH, else /usr/local/go/bin/go);
# GOMODCACHE/GOCACHE as usual.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${K8S_CACHE_DIR:-$HERE/.cache}"
BIN_DIR="$CACHE_DIR/bin"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN=local  # the wrapper modules need Go 1.26: never fetch another toolchain

log() { printf 'k8s/build.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ -x "$GO" ]] || die "'$GO' not found; install Go >= 1.26 (Debian: golang-go) to build the API server"

# build NAME MODULE_DIR PACKAGE: one binary from one wrapper module, skipped when its marker matches.
build() {
  local name="$1" mod="$2" pkg="$3" hash marker start
  hash="$( (cat "$mod/go.mod" "$mod/go.sum"; "$GO" version) | sha256sum | cut -c1-16)"
  marker="$BIN_DIR/.$name-$hash"
  [[ -f "$marker" && -x "$BIN_DIR/$name" ]] && return 0
  log "building $name from the Go module proxy (first run only, minutes) ..."
  start=$SECONDS
  # CGO off: no C toolchain needed; -trimpath and -s -w: smaller, reproducible binaries.
  (cd "$mod" && CGO_ENABLED=0 "$GO" build -mod=readonly -buildvcs=false -trimpath -ldflags='-s -w' \
      -o "$BIN_DIR/$name.tmp" "$pkg") || die "go build of $name failed (output above)"
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  rm -f "$BIN_DIR/.$name-"*
  touch "$marker"
  log "built $name in $((SECONDS - start)) s"
}

# One function, called on the last line: bash has read the whole file before it runs any of it, so
# a checkout that changes this script under a running build cannot derail it.
main() {
  mkdir -p "$BIN_DIR"
  exec 9>"$CACHE_DIR/.build.lock"
  flock 9
  build etcd "$HERE/etcd" .
  build kube-apiserver "$HERE/apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN_DIR"; fi
}

main "$@"
