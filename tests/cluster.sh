#!/usr/bin/env bash
# tests/cluster.sh — a real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager)
# on loopback, for upgradeplan's integration tests and `make demo`.
#
#   tests/cluster.sh install          # get the binaries (cached; idempotent), and Debian's prometheus
#   eval "$(tests/cluster.sh start)"  # start, wait for readiness, print export lines
#   tests/cluster.sh stop             # stop exactly the processes `start` started (by PID)
#   tests/cluster.sh env              # print the export lines again
#   tests/cluster.sh restart-apiserver  # stop kube-apiserver alone and start it again (RESTART_SIGNAL=KILL: crash)
#   tests/cluster.sh module v1.x.y    # move tests/k8s (the default release) to another release
#   tests/cluster.sh bin              # print the directory of the release's binaries (kubectl too)
#
# The release is the one tests/k8s/go.mod requires (the newest Kubernetes release the Go module proxy
# serves that builds here), or TESTENV_K8S_VERSION. Binaries, in order of preference: that release's
# from $KUBEBUILDER_ASSETS (envtest layout) or PATH, else built with the machine's Go from the module
# k8s.io/kubernetes and its staging modules (about 6 min on 2 cores; cached under $UPGRADEPLAN_CACHE):
# etcd (the version that release pins), kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet and kubectl. `start` puts that kubectl first on PATH.
#
# Knobs:
#   TESTENV_DIR          run directory: certs, etcd data, logs, pid files, kubeconfigs (/tmp/upgradeplan-testenv)
#   TESTENV_API_PORT     kube-apiserver secure port (16443)
#   TESTENV_ETCD_PORT    etcd client port (12379); the peer port is this + 1
#   TESTENV_K8S_VERSION  the Kubernetes release to install and start (default: tests/k8s/go.mod's)
#   TESTENV_APISERVER_ARGS  more kube-apiserver flags, split on spaces (e.g. --feature-gates=...)
#   UPGRADEPLAN_CACHE    where built binaries are kept (~/.cache/upgradeplan)
#   TESTENV_NODE=1       also a node: kube-scheduler, containerd (CRI) with runc and a kubelet, registered
#                        as node $NODE_NAME, ServiceAccount tokens mounted in pods, and a private Docker
#                        Engine to build images in (`make image` imports them into containerd); `start`
#                        then prints DOCKER_HOST and CONTAINERD_ADDRESS too. Pods sit on the bridge
#                        TESTENV_NODE_BRIDGE (upnode0), whose host side is TESTENV_NODE_IP (10.213.0.1/24):
#                        pods reach the API server there and talk only to it and to each other (no NAT,
#                        no forwarding).
#
# Kubeconfigs written to $TESTENV_DIR: admin.kubeconfig (client certificate, system:masters),
# no-rights.kubeconfig (static token of user "no-rights", no RBAC grants: for RBAC tests). The API
# server's audit log ($TESTENV_AUDIT_LOG, JSON lines) records every ServiceAccount's request and verdict.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODULE="$HERE/k8s"
# The default release: the one the committed module requires.
module_version() { awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$1/go.mod"; }
K8S_VERSION="${TESTENV_K8S_VERSION:-$(module_version "$MODULE")}"
[[ "$K8S_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "[cluster.sh] error: TESTENV_K8S_VERSION=$K8S_VERSION: expected a release such as v1.34.4" >&2; exit 2; }
CACHE="${UPGRADEPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradeplan}/testenv"
RUN="${TESTENV_DIR:-/tmp/upgradeplan-testenv}"
API_PORT="${TESTENV_API_PORT:-16443}"
ETCD_PORT="${TESTENV_ETCD_PORT:-12379}"
ETCD_PEER_PORT="$((ETCD_PORT + 1))"
BIN="$CACHE/$K8S_VERSION/bin"
NODE="${TESTENV_NODE:-0}"
NODE_BRIDGE="${TESTENV_NODE_BRIDGE:-upnode0}"
NODE_CIDR="${TESTENV_NODE_IP:-10.213.0.1/24}"
NODE_IP="${NODE_CIDR%/*}"
NODE_NAME=upgradeplan-testenv-node
# The programs of the release `install` builds from the module (k8s.io/kubernetes/cmd/<program>).
K8S_PROGRAMS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

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

# What a program prints of its version (kubectl has a subcommand for it, the others a flag).
version_of() { case "$(basename "$1")" in kubectl) "$1" version --client 2>/dev/null ;; *) "$1" --version 2>/dev/null ;; esac; }
# The release a Kubernetes binary says it is ("Kubernetes v1.37.2", "Client Version: v1.37.2"), if any.
release_of() { version_of "$1" | grep -oE 'v1\.[0-9]+\.[0-9]+' | head -n1; }

# Link a binary of the wanted release found elsewhere into $BIN, so that `start` has one place to look.
adopt() { # name path
  [ -x "$2" ] || return 1
  if [ "$1" != etcd ] && [ "$(release_of "$2")" != "$K8S_VERSION" ]; then return 1; fi
  mkdir -p "$BIN"; ln -sfn "$2" "$BIN/$1"; log "using $2"
}

cmd_install() {
  apt_install openssl curl ca-certificates jq
  # promtool (rule tests) and a real Prometheus server (scrape and alert tests).
  command -v promtool >/dev/null && command -v prometheus >/dev/null || apt_install prometheus
  mkdir -p "$BIN"
  local t build=()
  for t in etcd "${K8S_PROGRAMS[@]}"; do
    [ -x "$BIN/$t" ] && version_of "$BIN/$t" >/dev/null && continue
    if [ -n "${KUBEBUILDER_ASSETS:-}" ] && adopt "$t" "$KUBEBUILDER_ASSETS/$t"; then continue; fi
    if [ "$t" != etcd ] && command -v "$t" >/dev/null && adopt "$t" "$(command -v "$t")"; then continue; fi
    build+=("$t")
  done
  [ "${#build[@]}" = 0 ] || build_kubernetes "${build[@]}"
  # A node (TESTENV_NODE=1): containerd and runc for the kubelet, Docker to build images in.
  [ "$NODE" = 1 ] && install_node
  log "ready: $("$BIN/kube-apiserver" --version), etcd $("$BIN/etcd" --version | awk 'NR==1{print $3}')"
}

# Writes into $1 a Go module that requires k8s.io/kubernetes $2, replaces each of its staging modules
# (its go.mod points them at ./staging, which a dependency cannot use) by the published v0.MINOR.PATCH,
# and names the programs as tools, so that `go mod tidy` records every module they need in go.sum.
write_module() { # dir version
  local dir="$1" v="$2" gomod staging
  mkdir -p "$dir"
  gomod="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$v" | jq -r .GoMod)" \
    || die "the Go module proxy does not serve k8s.io/kubernetes@$v"
  staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")"
  {
    echo "// The Kubernetes release tests/cluster.sh builds: see README.md here. Written by 'tests/cluster.sh module $v'."
    echo "module upgradeplan.test/k8s"
    echo
    echo "go $(awk '$1 == "go" {print $2; exit}' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $v"
    echo
    echo "replace ("
    local m; for m in $staging; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${v#v1.}"; done
    echo ")"
    echo
    echo "tool ("
    local p; for p in "${K8S_PROGRAMS[@]}"; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$p"; done
    printf '\tgo.etcd.io/etcd/server/v3\n'
    echo ")"
  } >"$dir/go.mod"
  rm -f "$dir/go.sum"
  (cd "$dir" && go mod tidy) >"$dir/tidy.log" 2>&1 \
    || { tail -20 "$dir/tidy.log" >&2; die "go mod tidy failed for k8s.io/kubernetes@$v in $dir (log: $dir/tidy.log)"; }
  rm -f "$dir/tidy.log"
}

cmd_module() { # version: move tests/k8s to another release
  local v="${1:-}"
  [[ "$v" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "usage: $0 module v1.x.y"
  require_go
  write_module "$MODULE" "$v"
  log "tests/k8s now builds Kubernetes $v (etcd $(etcd_version "$MODULE"))"
}

etcd_version() { (cd "$1" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3); }

require_go() {
  command -v go >/dev/null || die "Go is needed to build Kubernetes $K8S_VERSION (the Go module proxy serves its source, no registry its binaries): install Go, or point KUBEBUILDER_ASSETS at binaries of that release"
}

# Builds the programs of $K8S_VERSION (and etcd) with the machine's Go into $BIN, from tests/k8s
# when that is the release asked for, else from a module written for it in the cache.
build_kubernetes() { # programs...
  require_go
  local dir="$MODULE" v="$K8S_VERSION" minor t pkgs=() ld="" p out="$CACHE/$K8S_VERSION/build"
  if [ "$(module_version "$MODULE")" != "$v" ]; then
    dir="$CACHE/$v/module"
    [ -f "$dir/go.sum" ] && [ "$(module_version "$dir")" = "$v" ] || write_module "$dir" "$v"
  fi
  minor="${v#v1.}"; minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  for t in "$@"; do
    case "$t" in etcd) ;; *) pkgs+=("k8s.io/kubernetes/cmd/$t") ;; esac
  done
  rm -rf "$out"; mkdir -p "$out"
  log "building $* of Kubernetes $v with $(go version | awk '{print $3}') (about 6 min on 2 cores; cached afterwards)"
  local t0; t0=$(date +%s)
  # Static binaries, as Kubernetes releases them; -mod=readonly: go.sum is the lock.
  (
    cd "$dir"
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly
    if [ "${#pkgs[@]}" -gt 0 ]; then go build -trimpath -ldflags "-s -w$ld" -o "$out/" "${pkgs[@]}"; fi
    case " $* " in *" etcd "*) go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3 ;; esac
  ) >"$out/build.log" 2>&1 || { tail -50 "$out/build.log" >&2; die "build failed (log: $out/build.log)"; }
  for t in "$@"; do
    chmod 0755 "$out/$t" && mv -f "$out/$t" "$BIN/$t"
  done
  rm -rf "$out"
  log "built $* in $(( $(date +%s) - t0 )) s: Kubernetes $("$BIN/kube-apiserver" --version | awk '{print $2}'), etcd $(etcd_version "$dir")"
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

# Whether something listens on 127.0.0.1:port (a connection is accepted).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits until nothing listens on the ports: a killed Go server's leader thread reads as gone
# (a zombie) a moment before its last thread exits and its sockets close.
wait_ports_free() { # ports...
  local port
  for port in "$@"; do
    wait_until 10 eval "! listening $port" || die "127.0.0.1:$port is still in use"
  done
}

launch_apiserver() {
  wait_ports_free "$API_PORT"
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
  # With a node, the API server listens where pods reach it too, and reaches the kubelet by address.
  local node_flags=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1)
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
    --profiling=false --v=1 ${TESTENV_APISERVER_ARGS:-}
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
  for t in etcd kube-apiserver kube-controller-manager kubectl; do
    [ -x "$BIN/$t" ] || die "$BIN/$t missing: run '$0 install' first (Kubernetes $K8S_VERSION)"
  done
  if [ -f "$RUN/kube-apiserver.pid" ] && alive "$(cat "$RUN/kube-apiserver.pid")"; then
    log "already running in $RUN"; env_lines; return 0
  fi
  rm -rf "$RUN"; mkdir -p "$RUN/logs"
  pki
  local t0; t0=$(date +%s.%N)
  # The 8 GiB quota (etcd's largest recommended; the default is 2 GiB) is for the 100k-binding bench,
  # whose history between the API server's compactions can approach the default.
  wait_ports_free "$ETCD_PORT" "$ETCD_PEER_PORT"
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
    --use-service-account-credentials=false --leader-elect=false --secure-port 0 --v=1
  wait_until 60 curl_admin "https://127.0.0.1:$API_PORT/api/v1/namespaces/default/serviceaccounts/default" \
    || { tail -40 "$RUN/logs/kube-controller-manager.log" >&2; cmd_stop; die "kube-controller-manager did not start"; }
  [ "$NODE" = 1 ] && start_node
  log "ready in $(elapsed "$t0") s: $("$BIN/kube-apiserver" --version) on https://127.0.0.1:$API_PORT (logs: $RUN/logs)"
  env_lines
}

docker_sock() { echo "$RUN/node/docker.sock"; }
containerd_sock() { echo "$RUN/node/containerd.sock"; }
in_docker() { DOCKER_HOST="unix://$(docker_sock)" docker "$@"; }
# ctr of our containerd, in the namespace the CRI plugin (and so the kubelet) uses.
in_containerd() { "$NODE_BIN/ctr" --address "$(containerd_sock)" --namespace k8s.io "$@"; }

# containerd, its runc shim and ctr, built from the containerd module tests/node/go.mod requires
# (Debian bookworm's containerd 1.6 is older than current kubelets accept); runc and the CNI
# plugins are Debian's; Docker (Debian's) only builds images, which are then imported into containerd.
CONTAINERD_PROGRAMS=(containerd containerd-shim-runc-v2 ctr)
CONTAINERD_VERSION="$(awk '$1 == "github.com/containerd/containerd/v2" {print $2; exit}' "$HERE/node/go.mod")"
NODE_BIN="$CACHE/containerd-$CONTAINERD_VERSION/bin"

install_node() {
  apt_install docker.io runc containernetworking-plugins gcc libc6-dev iproute2
  local t build=()
  for t in "${CONTAINERD_PROGRAMS[@]}"; do
    [ -x "$NODE_BIN/$t" ] && version_of "$NODE_BIN/$t" >/dev/null || build+=("$t")
  done
  [ "${#build[@]}" = 0 ] && return 0
  require_go
  local out="$CACHE/containerd-$CONTAINERD_VERSION/build" pkgs=() t0; t0=$(date +%s)
  for t in "${build[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$t"); done
  rm -rf "$out"; mkdir -p "$out" "$NODE_BIN"
  log "building ${build[*]} of containerd $CONTAINERD_VERSION (about 1 min on 2 cores; cached afterwards)"
  # Static, without the snapshotters that need cgo or kernel modules this node does not use.
  ( cd "$HERE/node" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -tags "no_btrfs no_zfs no_devmapper" \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" -o "$out/" "${pkgs[@]}" ) \
    >"$out/build.log" 2>&1 || { tail -50 "$out/build.log" >&2; die "containerd build failed (log: $out/build.log)"; }
  for t in "${build[@]}"; do mv -f "$out/$t" "$NODE_BIN/$t"; done
  rm -rf "$out"
  log "built ${build[*]} in $(( $(date +%s) - t0 )) s: containerd $("$NODE_BIN/containerd" --version | awk '{print $3}')"
}

# The node: kube-scheduler, containerd (its own root, state, socket and CNI configuration), a
# kubelet registered as $NODE_NAME, and a private Docker Engine that only builds images.
start_node() {
  for t in kube-scheduler kubelet; do
    [ -x "$BIN/$t" ] || { cmd_stop; die "$BIN/$t missing: run 'TESTENV_NODE=1 $0 install' first"; }
  done
  for t in "${CONTAINERD_PROGRAMS[@]}"; do
    [ -x "$NODE_BIN/$t" ] || { cmd_stop; die "$NODE_BIN/$t missing: run 'TESTENV_NODE=1 $0 install' first"; }
  done
  local n="$RUN/node"; mkdir -p "$n/containerd" "$n/cni" "$n/docker-data" "$n/docker-exec" "$n/kubelet" "$n/pause"
  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
    --secure-port 0 --v=1
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || ip link add "$NODE_BRIDGE" type bridge
  ip addr replace "$NODE_CIDR" dev "$NODE_BRIDGE"; ip link set "$NODE_BRIDGE" up
  # Pods on the bridge, addresses from its subnet above the host's; no gateway, no masquerade: a
  # pod reaches the host's bridge address (the API server) and the other pods, nothing else.
  cat >"$n/cni/10-upgradeplan-testenv.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "upgradeplan-testenv", "plugins": [
  {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(subnet_of "$NODE_CIDR")", "rangeStart": "$(host_plus "$NODE_IP" 10)"}]],
            "dataDir": "$n/cni/ipam"}},
  {"type": "loopback"}]}
CNI
  # restrict_oom_score_adj: the kubelet gives every pod sandbox oom_score_adj -998, which a
  # sandbox without CAP_SYS_RESOURCE may not set (runc: "can't get final child's PID from pipe");
  # containerd raises such values to its own score instead, as it does for rootless nodes.
  cat >"$n/containerd.toml" <<TOML
version = 3
root = "$n/containerd/root"
state = "$n/containerd/state"
[grpc]
  address = "$(containerd_sock)"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "docker.io/upgradeplan-testenv/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  # The pods' network namespaces under the run directory, where stop unmounts them.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$n/cni"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
  # Its shim must be the one of its own release, not a machine's containerd-shim-runc-v2.
  launch containerd env PATH="$NODE_BIN:$PATH" "$NODE_BIN/containerd" --config "$n/containerd.toml"
  wait_until 60 in_containerd version || { tail -30 "$RUN/logs/containerd.log" >&2; cmd_stop; die "containerd did not start"; }
  # Docker builds images (the Dockerfile); no container runs in it, so it needs no network.
  launch dockerd dockerd --data-root "$n/docker-data" --exec-root "$n/docker-exec" -H "unix://$(docker_sock)" \
    --pidfile "$n/dockerd.pid" --bridge none --iptables=false --ip-forward=false --ip-masq=false
  wait_until 60 in_docker info || { tail -30 "$RUN/logs/dockerd.log" >&2; cmd_stop; die "dockerd did not start"; }
  # No registry is reachable: the sandbox image is a static program of our own.
  gcc -static -O2 -o "$n/pause/pause" "$HERE/node/pause.c"
  tar -C "$n/pause" -cf "$n/pause.tar" pause
  in_docker import --change 'ENTRYPOINT ["/pause"]' "$n/pause.tar" upgradeplan-testenv/pause:1 >/dev/null
  in_docker save upgradeplan-testenv/pause:1 | in_containerd images import - >/dev/null \
    || { cmd_stop; die "could not import the pause image into containerd"; }
  # The kubelet's settings, as a configuration file (most flags are deprecated). The machine's
  # cgroups are v1, which kubelets from 1.35 on refuse unless failCgroupV1 is false; no QoS
  # cgroups, no node-allocatable enforcement and no eviction: this node is a test's, on a
  # shared machine whose memory and disk the kubelet must not act on.
  cat >"$n/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: ${TESTENV_KUBELET_PORT:-16250}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${TESTENV_KUBELET_HEALTHZ_PORT:-16248}
containerRuntimeEndpoint: unix://$(containerd_sock)
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
authentication: {webhook: {enabled: false}, anonymous: {enabled: false}, x509: {clientCAFile: "$RUN/pki/ca.crt"}}
authorization: {mode: AlwaysAllow}
YAML
  launch kubelet "$BIN/kubelet" --config "$n/kubelet.yaml" --kubeconfig "$RUN/admin.kubeconfig" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --root-dir "$n/kubelet" --cert-dir "$n/kubelet/pki" --v=1
  wait_until 120 node_ready || { tail -40 "$RUN/logs/kubelet.log" >&2; cmd_stop; die "the node did not become Ready"; }
  log "node $NODE_NAME Ready on $NODE_IP (containerd $CONTAINERD_VERSION at $(containerd_sock), images built by Docker at $(docker_sock))"
}

# 10.213.0.1/24 -> 10.213.0.0/24; and an address N above another in the same /24.
subnet_of() { local ip="${1%/*}" bits="${1#*/}"; echo "${ip%.*}.0/$bits"; }
host_plus() { echo "${1%.*}.$(( ${1##*.} + $2 ))"; }

node_ready() {
  curl_admin "https://127.0.0.1:$API_PORT/api/v1/nodes/$NODE_NAME" \
    | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null
}

# The pods' containers and sandboxes, stopped and removed through containerd (the kubelet is
# already stopped, so nothing starts them again).
stop_node() {
  [ -S "$(containerd_sock)" ] || return 0
  local id
  for id in $(in_containerd tasks ls -q 2>/dev/null); do in_containerd tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
  for id in $(in_containerd tasks ls -q 2>/dev/null); do
    wait_until 10 eval "! in_containerd tasks ls -q | grep -qx $id" || true
    in_containerd tasks delete -f "$id" >/dev/null 2>&1 || true
  done
  local containers; containers="$(in_containerd containers ls -q 2>/dev/null)" || true
  # shellcheck disable=SC2086 # one argument per container id
  [ -z "$containers" ] || in_containerd containers delete $containers >/dev/null 2>&1 || true
  return 0
}

env_lines() {
  echo "export KUBECONFIG=$RUN/admin.kubeconfig"
  # kubectl of the control plane's release first (a machine's own may be older, or absent).
  echo "export PATH=$BIN:\$PATH"
  echo "export TESTENV_DIR=$RUN"
  echo "export TESTENV_NO_RIGHTS_KUBECONFIG=$RUN/no-rights.kubeconfig"
  echo "export TESTENV_AUDIT_LOG=$RUN/logs/audit.log"
  if [ "$NODE" = 1 ]; then
    echo "export DOCKER_HOST=unix://$(docker_sock)"
    # ctr (on PATH) of the node's containerd, in the kubelet's namespace: `make image` imports there.
    echo "export PATH=$NODE_BIN:\$PATH"
    echo "export CONTAINERD_ADDRESS=$(containerd_sock) CONTAINERD_NAMESPACE=k8s.io"
  fi
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
  for name in containerd dockerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$name"; done
  if [ -d "$RUN/node" ]; then ip link del "$NODE_BRIDGE" 2>/dev/null || true; fi
  # The kubelet's volume mounts (the pods' tokens), containerd's (root filesystems, shm) and the
  # pods' network namespaces would keep the run directory busy.
  if [ -d "$RUN/node" ]; then
    grep -o " $RUN/node/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  fi
  [ "${TESTENV_KEEP:-0}" = 1 ] || rm -rf "$RUN"
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) env_lines ;;
  restart-apiserver) cmd_restart_apiserver ;;
  module) cmd_module "${2:-}" ;;
  bin) echo "$BIN" ;;
  *) echo "usage: $0 install|start|stop|env|restart-apiserver|module VERSION|bin   (see the header of this file)" >&2; exit 2 ;;
esac
