#!/usr/bin/env bash
# A one-node Kubernetes cluster on this machine for the end-to-end test (docs/kubernetes.md#a-local-cluster):
#   .dev/k8s/cluster.sh up|down|status|image|test   (through ./dev k8s ...)
# etcd, kube-apiserver, controller-manager, scheduler, containerd + kubelet and kube-proxy run as processes of this
# script (pids and logs in $STATE), pods on a bridge (rcl0, 10.244.0.0/24) whose gateway 10.244.0.1 is the node's
# address: the API server, the kubelet and the test's S3 server listen there, nothing on the machine's own
# interfaces. Binaries and base images are cached in $K8S_CACHE, keyed by version; `down` stops everything and
# removes the cluster's state (not the cache).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$REPO/.dev/k8s"
export K8S_VERSION=v1.32.4 ETCD_VERSION=3.5.21
# Outside the clone: every clone on this machine (CI's are fresh) reuses one build; RECLUSTER_K8S_CACHE moves it.
export K8S_CACHE=${RECLUSTER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/recluster/k8s}
STATE="$K8S_CACHE/state"
BIN="$K8S_CACHE/$K8S_VERSION/bin"
ETCD="$K8S_CACHE/etcd-$ETCD_VERSION/bin/etcd"
NODE=recluster-local
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
BRIDGE=rcl0
PKI="$STATE/pki"
KUBECONFIG_FILE="$STATE/admin.kubeconfig"
CONTAINERD_SOCKET="$STATE/containerd.sock"
DOCKER_HOST_SOCKET="unix://$STATE/docker.sock"
BASE_IMAGE=localhost/debian-minbase:bookworm
PYTHON_IMAGE=localhost/python:3.11-bookworm
IMAGE=localhost/recluster:local
PAUSE_IMAGE=localhost/pause:local
DOCKER=/usr/bin/docker  # Debian's docker.io client, the daemon's version (another client may be first on PATH)
COMPONENTS=(kube-proxy kubelet containerd kube-scheduler kube-controller-manager kube-apiserver etcd dockerd)

log() { echo "k8s: [${SECONDS}s] $*" >&2; }  # with the seconds since the command started
fail() { echo "k8s: FAILED: $*" >&2; exit 1; }

kubectl_bin() {
  if [ -x "$REPO/.venv/bin/kubectl" ]; then echo "$REPO/.venv/bin/kubectl"; else command -v kubectl; fi
}
kc() { "$(kubectl_bin)" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

packages() {
  # Debian's docker.io (image builds only), containerd, runc, the CNI plugins, debootstrap for the base image.
  local missing=()
  for tool in dockerd:docker.io containerd:containerd runc:runc debootstrap:debootstrap iptables:iptables \
    conntrack:conntrack openssl:openssl; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
  done
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} = 0 ] && return
  [ "$(id -u)" = 0 ] || fail "missing ${missing[*]}: install them (apt-get install ${missing[*]}) or run as root"
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

running() { [ -f "$STATE/pids/$1.pid" ] && kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null; }

start() {
  # start NAME COMMAND...: in its own session, logging to $STATE/logs/NAME.log
  local name=$1
  shift
  running "$name" && return
  mkdir -p "$STATE/pids" "$STATE/logs"
  setsid "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/pids/$name.pid"
}

stop() {
  local name=$1 pid
  [ -f "$STATE/pids/$name.pid" ] || return 0
  pid=$(cat "$STATE/pids/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/pids/$name.pid"
}

wait_until() {
  # wait_until SECONDS WHAT COMMAND...: polls COMMAND; on timeout one line naming WHAT and the log to read
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  fail "$what not ready after ${seconds}s (logs: $STATE/logs/)"
}

certificates() {
  # One CA; the API server's serving certificate (loopback-free: the node address and the kubernetes Service's
  # ClusterIP, 10.96.0.1), one client certificate in system:masters for the components and the tests, and the
  # service-account signing key.
  [ -f "$PKI/admin.crt" ] && return
  mkdir -p "$PKI"
  (
    cd "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=recluster-local-ca -keyout ca.key -out ca.crt
    printf 'subjectAltName=IP:%s,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,%s\n' \
      "$NODE_IP" "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" >apiserver.ext
    openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=recluster-admin" -keyout admin.key -out admin.csr
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out admin.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >/dev/null 2>&1
  "$(kubectl_bin)" config --kubeconfig "$KUBECONFIG_FILE" set-cluster local --server "https://$NODE_IP:6443" \
    --certificate-authority "$PKI/ca.crt" --embed-certs >/dev/null
  "$(kubectl_bin)" config --kubeconfig "$KUBECONFIG_FILE" set-credentials admin \
    --client-certificate "$PKI/admin.crt" --client-key "$PKI/admin.key" --embed-certs >/dev/null
  "$(kubectl_bin)" config --kubeconfig "$KUBECONFIG_FILE" set-context local --cluster local --user admin >/dev/null
  "$(kubectl_bin)" config --kubeconfig "$KUBECONFIG_FILE" use-context local >/dev/null
}

network() {
  # The pods' bridge, with the node's address on it; the CNI bridge plugin attaches each pod's veth to it.
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr show dev "$BRIDGE" | grep -q "inet $NODE_IP/" || ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  mkdir -p "$STATE/cni"
  cat >"$STATE/cni/10-recluster.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "recluster", "plugins": [{"type": "bridge", "bridge": "$BRIDGE",
  "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": "$STATE/cni-ipam", "routes": [{"dst": "0.0.0.0/0"}],
           "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]]}}]}
EOF
}

docker_daemon() {
  # Image builds only: no bridge and no iptables rules of its own (builds use the host's network), its layers
  # cached in $K8S_CACHE/docker.
  start dockerd dockerd --data-root "$K8S_CACHE/docker" --exec-root "$STATE/docker" --pidfile "$STATE/docker.pid" \
    -H "$DOCKER_HOST_SOCKET" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
    --storage-driver=overlay2
  wait_until 60 dockerd "$DOCKER" -H "$DOCKER_HOST_SOCKET" info
}

docker() { "$DOCKER" -H "$DOCKER_HOST_SOCKET" "$@"; }

images() {
  # The base: Debian bookworm minbase by debootstrap (no registry can be reached here), with Python 3.11 as a
  # venv at /usr/local (the layout of the python:3.11-slim images); then the project's Dockerfile on it, and the
  # pod sandbox's pause program.
  docker_daemon
  if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    local tarball="$K8S_CACHE/base/bookworm-minbase.tar"
    if [ ! -f "$tarball" ]; then
      log "debootstrap bookworm (minbase)"
      local root="$K8S_CACHE/base/root"
      rm -rf "$root" && mkdir -p "$root"
      debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$STATE/logs/debootstrap.log" 2>&1 ||
        fail "debootstrap (log: $STATE/logs/debootstrap.log)"
      tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball" && rm -rf "$root"
    fi
    docker import "$tarball" "$BASE_IMAGE" >/dev/null
  fi
  log "docker build $PYTHON_IMAGE (Debian's Python 3.11)"
  local context="$STATE/python-base"
  rm -rf "$context" && mkdir -p "$context/ca-certificates"
  cp "$HERE/python-base.Dockerfile" "$context/Dockerfile"
  find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$context/ca-certificates/" \; 2>/dev/null || true
  docker build -q --network host --build-arg "DEBIAN=$BASE_IMAGE" -t "$PYTHON_IMAGE" "$context" \
    >"$STATE/logs/python-base.log" 2>&1 || fail "docker build of $PYTHON_IMAGE (log: $STATE/logs/python-base.log)"
  log "docker build $PAUSE_IMAGE and $IMAGE (the work tree)"
  docker build -q -t "$PAUSE_IMAGE" -f "$HERE/pause.Dockerfile" "$K8S_CACHE/pause" >/dev/null ||
    fail "docker build of $PAUSE_IMAGE"
  docker build -q --network host --build-arg "BASE=$PYTHON_IMAGE" -t "$IMAGE" "$REPO" >"$STATE/logs/image.log" 2>&1 ||
    fail "docker build of $IMAGE (log: $STATE/logs/image.log)"
  docker image prune -f >/dev/null  # the layers of earlier builds of the same tags
  log "images built"
}

import_images() {
  # Images reach containerd as docker save archives; pods use imagePullPolicy Never or IfNotPresent. A minute on a
  # loaded machine: skipped when this containerd already holds what docker built (the test's `image` after `up`).
  local built
  built=$(docker image inspect -f '{{.Id}}' "$PAUSE_IMAGE" "$IMAGE" | tr '\n' ' ')
  if [ "$built" = "$(cat "$STATE/containerd/imported" 2>/dev/null)" ]; then log "images already imported"; return; fi
  docker save "$PAUSE_IMAGE" "$IMAGE" | ctr -a "$CONTAINERD_SOCKET" -n k8s.io images import - >/dev/null ||
    fail "importing $IMAGE into containerd"
  echo "$built" >"$STATE/containerd/imported"
  log "images imported into containerd"
}

control_plane() {
  start etcd "$ETCD" --name "$NODE" --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true --authorization-mode Node,RBAC \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --enable-priority-and-fairness=false --profiling=false
  wait_until 120 kube-apiserver kc get --raw /readyz
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG_FILE" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false --bind-address 127.0.0.1 --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KUBECONFIG_FILE" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
    --leader-elect=false --bind-address 127.0.0.1 --profiling=false
}

node() {
  # containerd: its CRI restricted to the oom_score_adj this machine allows (a negative one is denied, and runc
  # then fails every sandbox), cgroupfs (cgroup v1, no systemd), the local pause image, pods' network namespaces
  # under $STATE so that `down` finds them.
  mkdir -p "$STATE/containerd"
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCKET"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
EOF
  start containerd containerd --config "$STATE/containerd/config.toml"
  wait_until 60 containerd ctr -a "$CONTAINERD_SOCKET" version
  import_images
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCKET
failSwapOn: false
maxPods: 30
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
EOF
  start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" --kubeconfig "$KUBECONFIG_FILE" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" --root-dir "$STATE/kubelet/root" \
    --cert-dir "$STATE/kubelet/pki"
  start kube-proxy "$BIN/kube-proxy" --kubeconfig "$KUBECONFIG_FILE" --hostname-override "$NODE" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --nodeport-addresses "$NODE_IP/32" \
    --conntrack-max-per-core 0 --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
  wait_until 120 "node $NODE" kc wait --for=condition=Ready "node/$NODE" --timeout 1s
  wait_until 60 "the default service account" kc -n default get serviceaccount default
}

up() {
  local started=$SECONDS
  packages
  mkdir -p "$STATE/logs"
  log "Kubernetes $K8S_VERSION and etcd $ETCD_VERSION binaries (built when $K8S_CACHE has none)"
  "$HERE/build.sh" || fail "building Kubernetes $K8S_VERSION / etcd $ETCD_VERSION"
  network
  certificates
  images
  log "control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
  control_plane
  log "node: containerd (images imported), kubelet, kube-proxy"
  node
  log "cluster ready in $((SECONDS - started))s: KUBECONFIG=$KUBECONFIG_FILE"
}

unmount_under() {
  # Unmount everything under $1 (pods' volumes, network namespaces), deepest first.
  awk -v prefix="$1/" 'index($2, prefix) == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
}

down() {
  [ -d "$STATE" ] || return 0
  stop kube-proxy
  [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  stop kubelet
  if running containerd; then
    # the pods' containers: killed here, since their shims outlive containerd
    for task in $(ctr -a "$CONTAINERD_SOCKET" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$CONTAINERD_SOCKET" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  fi
  for component in "${COMPONENTS[@]}"; do stop "$component"; done
  for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCKET" || true); do kill -KILL "$shim"; done
  unmount_under "$STATE"
  ip link del "$BRIDGE" 2>/dev/null || true
  # What kube-proxy --cleanup leaves of the kubelet's and kube-proxy's rules (KUBE-FIREWALL drops packets to
  # 127.0.0.0/8 from other addresses): every KUBE-* chain and the rules that jump to them, other rules kept.
  for save in iptables-save ip6tables-save; do
    for table in filter nat mangle; do
      if "$save" -t "$table" 2>/dev/null | grep -q -- "KUBE-"; then
        "$save" -t "$table" | grep -v -- "KUBE-" | "${save%-save}-restore" -T "$table" || true
      fi
    done
  done
  rm -rf "$K8S_CACHE/last-logs" && mv "$STATE/logs" "$K8S_CACHE/last-logs" 2>/dev/null || true  # for a failure's
  rm -rf "$STATE"
  log "stopped (the cluster's logs kept in $K8S_CACHE/last-logs)"
}

status() {
  local code=0
  for component in "${COMPONENTS[@]}"; do
    if running "$component"; then echo "$component: running (pid $(cat "$STATE/pids/$component.pid"))"
    else echo "$component: stopped"; [ "$component" = dockerd ] || code=1; fi
  done
  [ "$code" = 0 ] && kc get nodes -o wide && echo "KUBECONFIG=$KUBECONFIG_FILE"
  return "$code"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  image) mkdir -p "$STATE/logs"; images; running containerd && import_images ;;
  test) shift; status >/dev/null || up; exec "$REPO/.venv/bin/python" -m pytest -m k8s_cluster -p no:cacheprovider \
    "$REPO/tests/test_k8s_cluster.py" "$@" ;;
  *) echo "usage: ./dev k8s up|down|status|image|test"; exit 2 ;;
esac
