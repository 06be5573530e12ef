#!/usr/bin/env bash
# tests/cluster.sh — a real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager)
# on loopback, for upgradeplan's integration tests and `make demo`.
#
#   tests/cluster.sh install          # get the binaries (cached; idempotent), and Debian's prometheus
#   eval "$(tests/cluster.sh start)"  # start, wait for readiness, print export lines
#   tests/cluster.sh stop             # stop exactly the processes `start` started (by PID)
#   tests/cluster.sh env              # print the export lines again
#   tests/cluster.sh restart-apiserver  # stop kube-apiserver alone and start it again (RESTART_SIGNAL=KILL: crash)
#
# Binaries, in order of preference: $KUBEBUILDER_ASSETS (envtest layout), etcd/kube-apiserver/
# kube-controller-manager on PATH, or a build from Debian bookworm's `kubernetes` source package
# (v1.20.2, dependencies vendored; ~10 min on 2 cores, cached under $UPGRADEPLAN_CACHE).
#
# Knobs:
#   TESTENV_DIR        run directory: certs, etcd data, logs, pid files, kubeconfigs (/tmp/upgradeplan-testenv)
#   TESTENV_API_PORT   kube-apiserver secure port (16443)
#   TESTENV_ETCD_PORT  etcd client port (12379); the peer port is this + 1
#   UPGRADEPLAN_CACHE  where built binaries are kept (~/.cache/upgradeplan)
#   TESTENV_NODE=1     also a node: kube-scheduler, a private Docker Engine and a kubelet (Kubernetes
#                      1.20's dockershim) registered as node $NODE_NAME, ServiceAccount admission on;
#                      `start` then prints DOCKER_HOST too. Its bridge TESTENV_NODE_BRIDGE (upnode0)
#                      has TESTENV_NODE_IP (10.213.0.1/24) on the host side: pods reach the API server
#                      there and talk only to it and to each other (no NAT, no forwarding).
#
# Kubeconfigs written to $TESTENV_DIR: admin.kubeconfig (client certificate, system:masters),
# no-rights.kubeconfig (static token of user "no-rights", no RBAC grants: for RBAC tests). The API
# server's audit log ($TESTENV_AUDIT_LOG, JSON lines) records every ServiceAccount's request and verdict.
set -euo pipefail

CACHE="${UPGRADEPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradeplan}/testenv"
RUN="${TESTENV_DIR:-/tmp/upgradeplan-testenv}"
API_PORT="${TESTENV_API_PORT:-16443}"
ETCD_PORT="${TESTENV_ETCD_PORT:-12379}"
ETCD_PEER_PORT="$((ETCD_PORT + 1))"
BIN="$CACHE/bin"
NODE="${TESTENV_NODE:-0}"
NODE_BRIDGE="${TESTENV_NODE_BRIDGE:-upnode0}"
NODE_CIDR="${TESTENV_NODE_IP:-10.213.0.1/24}"
NODE_IP="${NODE_CIDR%/*}"
NODE_NAME=upgradeplan-testenv-node
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Debian bookworm's source package: 1.20.5+really1.20.2 (dependencies vendored).
K8S_VERSION=v1.20.2

log() { echo "[cluster.sh] $*" >&2; }
die() { log "error: $*"; exit 1; }

apt_install() { # packages...
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" = 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Link a binary found elsewhere into $BIN, so that `start` has one place to look.
adopt() { # name path
  [ -x "$2" ] || return 1
  mkdir -p "$BIN"; ln -sfn "$2" "$BIN/$1"; log "using $2"
}

cmd_install() {
  apt_install openssl curl ca-certificates jq
  command -v kubectl >/dev/null || apt_install kubernetes-client
  # promtool (rule tests) and a real Prometheus server (scrape and alert tests).
  command -v promtool >/dev/null && command -v prometheus >/dev/null || apt_install prometheus
  mkdir -p "$BIN"
  local t
  for t in etcd kube-apiserver kube-controller-manager; do
    [ -x "$BIN/$t" ] && "$BIN/$t" --version >/dev/null 2>&1 && continue
    if [ -n "${KUBEBUILDER_ASSETS:-}" ] && adopt "$t" "$KUBEBUILDER_ASSETS/$t"; then continue; fi
    if command -v "$t" >/dev/null && adopt "$t" "$(command -v "$t")"; then continue; fi
    if [ "$t" = etcd ]; then apt_install etcd-server; adopt etcd /usr/bin/etcd; fi
  done
  local build=() targets=(kube-apiserver kube-controller-manager)
  # A node too (TESTENV_NODE=1): the scheduler places pods, the kubelet runs them in a private
  # Docker Engine (dockershim: Kubernetes 1.20's kubelet talks to Docker directly).
  if [ "${TESTENV_NODE:-0}" = 1 ]; then
    targets+=(kube-scheduler kubelet)
    apt_install docker.io gcc libc6-dev iproute2
  fi
  for t in "${targets[@]}"; do
    "$BIN/$t" --version >/dev/null 2>&1 || build+=("$t")
  done
  if [ "${#build[@]}" = 0 ]; then
    log "ready: $("$BIN/kube-apiserver" --version), etcd $("$BIN/etcd" --version | awk 'NR==1{print $3}')"
    return 0
  fi
  build_from_debian_source "${build[@]}"
}

build_from_debian_source() { # targets...
  apt_install golang-go rsync make jq golang-github-modern-go-reflect2-dev
  local work="$CACHE/work"; rm -rf "$work"; mkdir -p "$work/apt/lists/partial"
  # A private apt configuration with deb-src lines: /etc/apt is left alone.
  cat >"$work/apt/sources.list" <<'SRC'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
SRC
  local aptopts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
                 -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
  apt-get "${aptopts[@]}" update -qq 2>/dev/null
  # Checked against the signed Sources index by apt.
  ( cd "$work" && apt-get "${aptopts[@]}" source --download-only -qq kubernetes 2>/dev/null )
  tar -xzf "$work"/kubernetes_*.orig.tar.gz -C "$work"
  local src; src="$(ls -d "$work"/kubernetes-*/ | head -n1)"; src="${src%/}"
  # Kubernetes 1.20 vendors modern-go/reflect2 1.0.1, whose map iteration corrupts memory under
  # Go >= 1.18 (the API server dies on the first custom-resource create). Debian's 1.0.2 fixes it.
  local r2="$src/vendor/github.com/modern-go/reflect2" f
  rm -f "$r2"/*.go
  for f in /usr/share/gocode/src/github.com/modern-go/reflect2/*.go; do
    case "$f" in *_test.go) ;; *) cp "$f" "$r2/" ;; esac
  done
  mkdir -p "$src/.go/src/k8s.io"; ln -sfn ../../.. "$src/.go/src/k8s.io/kubernetes"
  log "building $* $K8S_VERSION from Debian's source package (about 10 min on 2 cores; cached afterwards)"
  local targets=("${@/#/cmd/}")
  ( cd "$src" && env GOPATH="$src/.go" CGO_ENABLED=0 HOME="$work/home" \
      KUBE_GIT_VERSION=$K8S_VERSION KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 \
      make WHAT="${targets[*]}" >"$work/build.log" 2>&1 ) \
    || { tail -50 "$work/build.log" >&2; die "build failed (log: $work/build.log)"; }
  for t in "$@"; do
    cp "$src/_output/bin/$t" "$BIN/$t.tmp" && chmod 0755 "$BIN/$t.tmp" && mv "$BIN/$t.tmp" "$BIN/$t"
  done
  rm -rf "$work"
  log "built $*: $("$BIN/$1" --version)"
}

pki() {
  local d="$RUN/pki"; mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=upgradeplan-testenv-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' "$NODE_IP" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
    # O=system:masters: cluster-admin without RBAC bindings.
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=upgradeplan-testenv-admin" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    printf '%s,no-rights,no-rights,"testers"\n' "$(openssl rand -hex 16)" >tokens.csv
    chmod 600 ./*.key tokens.csv
  )
}

kubeconfig() { # file user user-yaml
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: upgradeplan-testenv
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $RUN/pki/ca.crt
contexts:
- name: upgradeplan-testenv
  context: {cluster: upgradeplan-testenv, user: $2, namespace: default}
current-context: upgradeplan-testenv
users:
- name: $2
  user:
$3
KC
}

alive() { # running and not a zombie
  [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"
}

wait_until() { # seconds command...
  local max="$1" i=0; shift
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1)); [ "$i" -ge $((max * 10)) ] && return 1; sleep 0.1
  done
}

elapsed() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $1}"; }

launch() { # name command... : start in its own session, record its PID
  setsid "${@:2}" >>"$RUN/logs/$1.log" 2>&1 </dev/null &
  echo $! >"$RUN/$1.pid"
}

launch_apiserver() {
  # Every request of a ServiceAccount, with its verdict (the metadata, no bodies): what the
  # deploy/ RBAC was refused is read here, not guessed from a client's log.
  cat >"$RUN/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
POLICY
  # Without a node no pod runs, and pods need no ServiceAccount token; with one, the kubelet's pods
  # get theirs mounted, and the API server listens where pods reach it too.
  local node_flags=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --disable-admission-plugins ServiceAccount)
  if [ "$NODE" = 1 ]; then
    node_flags=(--bind-address 0.0.0.0 --advertise-address "$NODE_IP" --kubelet-preferred-address-types InternalIP
                --kubelet-client-certificate "$RUN/pki/admin.crt" --kubelet-client-key "$RUN/pki/admin.key")
  fi
  launch kube-apiserver "$BIN/kube-apiserver" "${node_flags[@]}" \
    --audit-policy-file "$RUN/audit-policy.yaml" --audit-log-path "$RUN/logs/audit.log" --audit-log-format json \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --secure-port "$API_PORT" \
    --tls-cert-file "$RUN/pki/apiserver.crt" --tls-private-key-file "$RUN/pki/apiserver.key" \
    --client-ca-file "$RUN/pki/ca.crt" --token-auth-file "$RUN/pki/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$RUN/pki/sa.pub" --service-account-signing-key-file "$RUN/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/24 --authorization-mode RBAC --endpoint-reconciler-type none \
    --profiling=false --v=1
}

curl_admin() { curl -fsS --max-time 2 --cacert "$RUN/pki/ca.crt" --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" "$@"; }

wait_apiserver() { # seconds
  wait_until "$1" curl_admin "https://127.0.0.1:$API_PORT/readyz"
}

# Stops kube-apiserver alone (etcd and the controller-manager keep running) and starts it again
# with the same flags and certificates: clients see their connections drop and the server
# come back. RESTART_SIGNAL (default TERM; KILL for a crash) is how it is stopped.
cmd_restart_apiserver() {
  local pid signal="${RESTART_SIGNAL:-TERM}" t0
  [ -f "$RUN/kube-apiserver.pid" ] || die "no kube-apiserver started from $RUN"
  pid="$(cat "$RUN/kube-apiserver.pid")"
  t0=$(date +%s.%N)
  if alive "$pid"; then
    kill "-$signal" "$pid" 2>/dev/null || true
    # On SIGTERM it stops listening at once, then drains long-running requests for up to a
    # minute; clients already see it gone, so the drain is cut short.
    wait_until 5 eval "! alive $pid" || kill -KILL "$pid" 2>/dev/null || true
    wait_until 10 eval "! alive $pid" || true
  fi
  log "kube-apiserver stopped (SIG$signal) after $(elapsed "$t0") s; starting it again"
  launch_apiserver
  wait_apiserver 120 || { tail -40 "$RUN/logs/kube-apiserver.log" >&2; die "kube-apiserver did not come back"; }
  log "kube-apiserver back in $(elapsed "$t0") s"
}

cmd_start() {
  for t in etcd kube-apiserver kube-controller-manager; do
    [ -x "$BIN/$t" ] || die "$BIN/$t missing: run '$0 install' first"
  done
  if [ -f "$RUN/kube-apiserver.pid" ] && alive "$(cat "$RUN/kube-apiserver.pid")"; then
    log "already running in $RUN"; env_lines; return 0
  fi
  rm -rf "$RUN"; mkdir -p "$RUN/logs"
  pki
  local t0; t0=$(date +%s.%N)
  # The 8 GiB quota (etcd's largest recommended; the default is 2 GiB) is for the 100k-binding bench,
  # whose history between the API server's compactions can approach the default.
  launch etcd "$BIN/etcd" --name upgradeplan-testenv --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "upgradeplan-testenv=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --unsafe-no-fsync --quota-backend-bytes 8589934592 --logger zap --log-level warn
  wait_until 30 curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" \
    || { tail -30 "$RUN/logs/etcd.log" >&2; cmd_stop; die "etcd did not become healthy"; }
  launch_apiserver
  kubeconfig "$RUN/admin.kubeconfig" admin "    client-certificate: $RUN/pki/admin.crt
    client-key: $RUN/pki/admin.key"
  kubeconfig "$RUN/no-rights.kubeconfig" no-rights "    token: $(cut -d, -f1 "$RUN/pki/tokens.csv")"
  wait_apiserver 120 || { tail -40 "$RUN/logs/kube-apiserver.log" >&2; cmd_stop; die "kube-apiserver did not become ready"; }
  # The controller-manager garbage-collects owned objects, finishes namespace deletion and
  # creates default ServiceAccounts.
  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$RUN/admin.kubeconfig" \
    --service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false --port 0 --secure-port 0 --v=1
  wait_until 60 curl_admin "https://127.0.0.1:$API_PORT/api/v1/namespaces/default/serviceaccounts/default" \
    || { tail -40 "$RUN/logs/kube-controller-manager.log" >&2; cmd_stop; die "kube-controller-manager did not start"; }
  [ "$NODE" = 1 ] && start_node
  log "ready in $(elapsed "$t0") s: $("$BIN/kube-apiserver" --version) on https://127.0.0.1:$API_PORT (logs: $RUN/logs)"
  env_lines
}

docker_sock() { echo "$RUN/node/docker.sock"; }
in_docker() { DOCKER_HOST="unix://$(docker_sock)" docker "$@"; }

# The node: kube-scheduler, a private Docker Engine (its own data root, exec root, socket and
# bridge; the clamping runtime as default) and a kubelet registered as $NODE_NAME.
start_node() {
  for t in kube-scheduler kubelet; do
    [ -x "$BIN/$t" ] || { cmd_stop; die "$BIN/$t missing: run 'TESTENV_NODE=1 $0 install' first"; }
  done
  local n="$RUN/node"; mkdir -p "$n/docker-data" "$n/docker-exec" "$n/kubelet" "$n/dockershim" "$n/pause"
  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
    --port 0 --secure-port 0 --v=1
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || ip link add "$NODE_BRIDGE" type bridge
  ip addr replace "$NODE_CIDR" dev "$NODE_BRIDGE"; ip link set "$NODE_BRIDGE" up
  # The kubelet gives every pod sandbox oom_score_adj -998, which a sandbox without CAP_SYS_RESOURCE
  # may not set (runc: "can't get final child's PID from pipe"): tests/node/runc-clamp clamps it.
  launch dockerd dockerd --data-root "$n/docker-data" --exec-root "$n/docker-exec" -H "unix://$(docker_sock)" \
    --pidfile "$n/dockerd.pid" --bridge "$NODE_BRIDGE" --iptables=false --ip-forward=false --ip-masq=false \
    --add-runtime "clamp=$HERE/node/runc-clamp" --default-runtime clamp
  wait_until 60 in_docker info || { tail -30 "$RUN/logs/dockerd.log" >&2; cmd_stop; die "dockerd did not start"; }
  # No registry is reachable: the sandbox image is a static program of our own.
  gcc -static -O2 -o "$n/pause/pause" "$HERE/node/pause.c"
  tar -C "$n/pause" -cf "$n/pause.tar" pause
  in_docker import --change 'ENTRYPOINT ["/pause"]' "$n/pause.tar" upgradeplan-testenv/pause:1 >/dev/null
  launch kubelet "$BIN/kubelet" --kubeconfig "$RUN/admin.kubeconfig" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --address "$NODE_IP" --port "${TESTENV_KUBELET_PORT:-16250}" --read-only-port 0 \
    --healthz-bind-address 127.0.0.1 --healthz-port "${TESTENV_KUBELET_HEALTHZ_PORT:-16248}" \
    --root-dir "$n/kubelet" --cert-dir "$n/kubelet/pki" --experimental-dockershim-root-directory "$n/dockershim" \
    --container-runtime docker --docker-endpoint "unix://$(docker_sock)" \
    --pod-infra-container-image upgradeplan-testenv/pause:1 \
    --fail-swap-on=false --cgroup-driver cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= \
    --eviction-hard= --image-gc-high-threshold 100 --image-gc-low-threshold 99 \
    --authentication-token-webhook=false --authorization-mode AlwaysAllow --v=1
  wait_until 120 node_ready || { tail -40 "$RUN/logs/kubelet.log" >&2; cmd_stop; die "the node did not become Ready"; }
  log "node $NODE_NAME Ready on $NODE_IP (Docker at $(docker_sock))"
}

node_ready() {
  curl_admin "https://127.0.0.1:$API_PORT/api/v1/nodes/$NODE_NAME" \
    | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null
}

stop_node() {
  [ -S "$(docker_sock)" ] && in_docker ps -aq 2>/dev/null | xargs -r env DOCKER_HOST="unix://$(docker_sock)" docker rm -f >/dev/null 2>&1
  return 0
}

env_lines() {
  echo "export KUBECONFIG=$RUN/admin.kubeconfig"
  echo "export TESTENV_DIR=$RUN"
  echo "export TESTENV_NO_RIGHTS_KUBECONFIG=$RUN/no-rights.kubeconfig"
  echo "export TESTENV_AUDIT_LOG=$RUN/logs/audit.log"
  [ "$NODE" = 1 ] && echo "export DOCKER_HOST=unix://$(docker_sock)"
  return 0
}

stop_pid() { # name: the process `start` recorded, by its PID
  local pid
  [ -f "$RUN/$1.pid" ] || return 0
  pid="$(cat "$RUN/$1.pid")"
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    wait_until 15 eval "! alive $pid" || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN/$1.pid"
}

cmd_stop() {
  local name
  # The kubelet first (it would restart what is removed), then the pods' containers, then the rest.
  stop_pid kubelet
  stop_node
  for name in dockerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$name"; done
  if [ -d "$RUN/node" ]; then ip link del "$NODE_BRIDGE" 2>/dev/null || true; fi
  # The kubelet's volume mounts (the pods' tokens) would keep the run directory busy.
  if [ -d "$RUN/node/kubelet" ]; then
    grep -o " $RUN/node/kubelet[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  fi
  [ "${TESTENV_KEEP:-0}" = 1 ] || rm -rf "$RUN"
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) env_lines ;;
  restart-apiserver) cmd_restart_apiserver ;;
  *) echo "usage: $0 install|start|stop|env|restart-apiserver   (see the header of this file)" >&2; exit 2 ;;
esac
