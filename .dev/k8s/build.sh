#!/usr/bin/env bash
# Builds the local cluster's Kubernetes and etcd binaries from the Go module proxy into $K8S_CACHE/<version>/bin
# (docs/kubernetes.md#a-local-cluster): kind and k3s need images or downloads this machine cannot have, Debian's
# etcd 3.4 breaks Spark's pod watches. A version already built is kept; `rm -rf` its directory to rebuild.
set -euo pipefail
: "${K8S_VERSION:?}" "${ETCD_VERSION:?}" "${K8S_CACHE:?}"
here=$(cd "$(dirname "$0")" && pwd)
bin="$K8S_CACHE/$K8S_VERSION/bin"
etcd_bin="$K8S_CACHE/etcd-$ETCD_VERSION/bin"
work="$K8S_CACHE/go"  # GOPATH, module and build caches: removed once the binaries are in place
export GOPATH="$work/path" GOMODCACHE="$work/path/pkg/mod" GOCACHE="$work/cache" CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOTOOLCHAIN=local

log() { echo "k8s build: [${SECONDS}s] $*" >&2; }  # progress lines: where a cold build's time goes

kubernetes() {
  # A module that requires k8s.io/kubernetes and points each of its staging modules (k8s.io/api, client-go, ...,
  # replaced by ./staging/src/... in its own go.mod) at the matching v0.x release; sample-* are not needed.
  local src="$work/kubernetes" staging="v0${K8S_VERSION#v1}"
  rm -rf "$src" && mkdir -p "$src"
  cd "$src"
  go mod init recluster.local/kubernetes >/dev/null 2>&1
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | grep -v '/sample-' |
    while read -r module; do go mod edit -replace="$module=$module@$staging"; done
  printf 'package tools\n\nimport (\n' >tools.go
  for command in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$command" >>tools.go
  done
  printf ')\n' >>tools.go
  sed -i '1i //go:build tools' tools.go
  log "Kubernetes $K8S_VERSION: downloading its modules"
  go mod tidy -e >/dev/null 2>&1 || true
  mkdir -p "$bin.tmp"
  for command in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    log "Kubernetes $K8S_VERSION: go build $command"
    go build -trimpath -ldflags="-s -w" -o "$bin.tmp/$command" "k8s.io/kubernetes/cmd/$command"
  done
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
}

etcd() {
  local src="$work/etcd"
  rm -rf "$src" && mkdir -p "$src"
  cd "$src"
  go mod init recluster.local/etcd >/dev/null 2>&1
  go mod edit -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
  log "etcd $ETCD_VERSION: downloading its modules"
  go mod tidy -e >/dev/null 2>&1 || true
  mkdir -p "$etcd_bin.tmp"
  log "etcd $ETCD_VERSION: go build"
  go build -trimpath -ldflags="-s -w" -o "$etcd_bin.tmp/etcd" go.etcd.io/etcd/server/v3
  rm -rf "$etcd_bin" && mv "$etcd_bin.tmp" "$etcd_bin"
}

pause() {
  # The pod sandbox's process (containerd's sandbox_image): a static Go program, k8s/local/pause.
  mkdir -p "$K8S_CACHE/pause"
  (cd "$here/pause" && go build -trimpath -ldflags="-s -w" -o "$K8S_CACHE/pause/pause" .)
}

go_toolchain() {
  # Go 1.23 or later: on PATH, or where the official tarball installs it (a login shell's PATH is not CI's).
  command -v go >/dev/null 2>&1 || PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null 2>&1 || { echo "k8s build: FAILED: no go (Go 1.23 or later) on PATH" >&2; exit 1; }
}

[ -x "$etcd_bin/etcd" ] || { go_toolchain; log "building etcd $ETCD_VERSION"; etcd; }
[ -x "$bin/kubelet" ] || { go_toolchain; log "building Kubernetes $K8S_VERSION (8 min on 2 quiet cores)"; kubernetes; }
[ -x "$K8S_CACHE/pause/pause" ] || { go_toolchain; log "building the pause program"; pause; }
rm -rf "$work"
log "binaries in place"
