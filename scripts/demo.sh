#!/usr/bin/env bash
# scripts/demo.sh start|stop — the `make demo` / `make demo-stop` walkthrough.
#
# start: a local control plane (its own instance: $DEMO_DIR, ports 17443/13379), the CRDs,
# kratix-sim standing in for Kratix, the controller, Prometheus with the shipped alert rules, a
# Promise with three versions, 30 resources in three namespaces, a three-group plan and a run
# followed until it completes; then a second plan whose run fails on one resource, and the
# UpgradeRunFailed alert that fires for it.
# stop: stops Prometheus, the controller, kratix-sim and the control plane, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
export TESTENV_DIR="${DEMO_DIR:-/tmp/upgradeplan-demo}"
export TESTENV_API_PORT="${DEMO_API_PORT:-17443}"
export TESTENV_ETCD_PORT="${DEMO_ETCD_PORT:-13379}"
BIN=target/debug
METRICS_PORT="${DEMO_METRICS_PORT:-18080}"
HEALTH_PORT="${DEMO_HEALTH_PORT:-18081}"
PROM_PORT="${DEMO_PROMETHEUS_PORT:-19090}"
# Bold headings on a terminal; plain text in a pipe or a log, or with NO_COLOR (no-color.org).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
else
  say() { printf '\n==> %s\n' "$*"; }
fi

stop_pid() { # name
  local f="$TESTENV_DIR/demo-$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if [ -r "/proc/$pid/status" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do [ -r "/proc/$pid/status" ] || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

cmd_stop() {
  stop_pid prometheus
  stop_pid upgradeplan-controller
  stop_pid kratix-sim
  tests/cluster.sh stop
  echo "demo stopped"
}

cmd_start() {
  say "Control plane (etcd, kube-apiserver, kube-controller-manager) on 127.0.0.1:$TESTENV_API_PORT"
  eval "$(tests/cluster.sh start)"
  say "CRDs: Kratix's (test fixtures) and upgradeplan's (deploy/crds)"
  kubectl apply -f tests/fixtures/kratix-crds.yaml >/dev/null
  kubectl apply -k deploy/crds >/dev/null
  kubectl wait --for condition=established --timeout=60s crd --all >/dev/null
  kubectl create namespace kratix-platform-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  say "kratix-sim (plays Kratix: makes each Resource Request's binding; each upgrade takes 1s) and upgradeplan-controller"
  setsid "$BIN/kratix-sim" --delay 1s >"$TESTENV_DIR/logs/kratix-sim.log" 2>&1 </dev/null &
  echo $! >"$TESTENV_DIR/demo-kratix-sim.pid"
  setsid "$BIN/upgradeplan-controller" --health-addr "127.0.0.1:$HEALTH_PORT" --metrics-addr "127.0.0.1:$METRICS_PORT" \
    >"$TESTENV_DIR/logs/upgradeplan-controller.log" 2>&1 </dev/null &
  echo $! >"$TESTENV_DIR/demo-upgradeplan-controller.pid"

  say "Prometheus (Debian's) on 127.0.0.1:$PROM_PORT, scraping the controller, with deploy/monitoring/rules.yaml"
  mkdir -p "$TESTENV_DIR/prometheus"
  cat >"$TESTENV_DIR/prometheus/prometheus.yml" <<YAML
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$PWD/deploy/monitoring/rules.yaml"]
scrape_configs:
  - job_name: upgradeplan-controller
    static_configs: [{targets: ["127.0.0.1:$METRICS_PORT"]}]
YAML
  setsid prometheus --config.file="$TESTENV_DIR/prometheus/prometheus.yml" \
    --storage.tsdb.path="$TESTENV_DIR/prometheus/data" --web.listen-address="127.0.0.1:$PROM_PORT" \
    >"$TESTENV_DIR/logs/prometheus.log" 2>&1 </dev/null &
  echo $! >"$TESTENV_DIR/demo-prometheus.pid"

  say "Promise redis (v1.0.0, v2.0.0) and 30 Redis requests made when v1.0.0 was the latest, in team-a, team-b, team-c"
  kubectl apply -f examples/demo/promise.yaml >/dev/null
  # kratix-sim installs the Promise's request kind (its spec.api), as Kratix does.
  local i
  for i in $(seq 1 60); do kubectl get crd redis.redis.marketplace.kratix.io >/dev/null 2>&1 && break; sleep 1; done
  kubectl wait --for condition=established --timeout=60s crd redis.redis.marketplace.kratix.io >/dev/null
  local envs=(dev staging prod) ns env name
  for ns in team-a team-b team-c; do
    kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    for i in $(seq 0 9); do
      env="${envs[$(( (i + ${#ns}) % 3 ))]}"
      [ "$ns" = team-c ] && [ "$i" -ge 7 ] && env=prod
      name="cache-$i"
      # kratix-sim/binding-version: the request was made when v1.0.0 was the latest (Kratix's
      # pinned strategy); kratix-sim makes its ResourceBinding and applies that version.
      cat <<YAML
apiVersion: redis.marketplace.kratix.io/v1alpha1
kind: Redis
metadata:
  name: $name
  namespace: $ns
  labels: {env: $env}
  annotations: {kratix-sim/binding-version: v1.0.0}
spec: {size: small}
---
YAML
    done
  done | kubectl apply -f - >/dev/null
  local applied=0
  for i in $(seq 1 120); do
    applied="$(kubectl get resourcebindings -A -l kratix.io/promise-name=redis -o jsonpath='{range .items[*]}{.status.lastAppliedVersion}{"\n"}{end}' | grep -c '^v1.0.0$' || true)"
    [ "$applied" -eq 30 ] && break
    sleep 1
  done
  [ "$applied" -eq 30 ] || { echo "kratix-sim made and applied $applied of the 30 bindings" >&2; return 1; }
  kubectl get redis -A | sed -n 1,4p; echo "   … (30 in all)"
  kubectl get resourcebindings -A | sed -n 1,4p; echo "   … (one per request, made by Kratix)"

  # prod's deny window is 12:00-13:00 UTC in the example; the demo moves it twelve hours away from
  # now, so that it shows a window and never holds the demo's run (whenever the demo runs).
  deny_hour=$(( ($(date -u +%-H) + 12) % 24 ))
  say "The plan (examples/demo/plan.yaml; prod's deny window moved to ${deny_hour}:00 UTC)"
  sed "s/schedule: \"0 12 \* \* \*\"/schedule: \"0 ${deny_hour} * * *\"/" examples/demo/plan.yaml | kubectl apply -f - >/dev/null
  sleep 1
  kubectl get upgradeplan redis-v1-to-v2 -o wide
  if [ -x "$BIN/kubectl-upgradeplan" ]; then "$BIN/kubectl-upgradeplan" explain redis-v1-to-v2 || true; fi
  say "How long a run would take, before it starts (kubectl upgradeplan forecast; kratix-sim takes ~1 s per upgrade)"
  if [ -x "$BIN/kubectl-upgradeplan" ]; then "$BIN/kubectl-upgradeplan" forecast redis-v1-to-v2 --per-resource 1s || true; fi

  say "A run (examples/demo/run.yaml), followed until it finishes"
  kubectl apply -f examples/demo/run.yaml >/dev/null
  local last="" now state=""
  for _ in $(seq 1 180); do
    now="$(kubectl get upgraderun redis-v1-to-v2-demo -o jsonpath='{.status.state} {.status.completedResources}/{.status.totalResources} {range .status.rolloutGroups[*]}{.name}={.succeeded}/{.total} {end}')"
    if [ "$now" != "$last" ]; then echo "  $(date +%T)  $now"; last="$now"; fi
    state="${now%% *}"
    case "$state" in Completed|Failed|Cancelled) break ;; esac
    sleep 1
  done
  kubectl get upgraderuns
  kubectl get upgradeplans
  kubectl get events --field-selector involvedObject.name=redis-v1-to-v2-demo --sort-by=.lastTimestamp | tail -5
  if [ -x "$BIN/kubectl-upgradeplan" ]; then "$BIN/kubectl-upgradeplan" history redis-v1-to-v2 || true; fi
  [ "$state" = Completed ] || { echo "the first run did not complete: $last" >&2; return 1; }

  say "A second plan, v2.0.0 to v3.0.0 (examples/demo/failing-plan.yaml); team-b/cache-3 will fail its upgrade"
  kubectl apply -f examples/demo/failing-plan.yaml >/dev/null
  kubectl annotate resourcebinding -n team-b -l kratix.io/resource-name=cache-3 kratix-sim/fail-version=v3.0.0 --overwrite >/dev/null
  sleep 6 # a scrape: Prometheus sees the new plan's counters at 0 before its run fails
  say "Before running it: which group each resource is in (kubectl upgradeplan match)"
  "$BIN/kubectl-upgradeplan" match redis-v2-to-v3 || true
  say "…and when one resource will be upgraded (match --resource team-b/cache-3)"
  "$BIN/kubectl-upgradeplan" match redis-v2-to-v3 --resource team-b/cache-3 || true

  say "Run it (kubectl upgradeplan run) and follow it (status -w exits 1: the run failed)"
  local failing
  failing="$("$BIN/kubectl-upgradeplan" run redis-v2-to-v3)"
  echo "$failing"
  "$BIN/kubectl-upgradeplan" status "$failing" -w --timeout 120s && true
  echo "(status -w exited $?)"

  say "Prometheus: the UpgradeRunFailed alert for $failing (rules: deploy/monitoring/rules.yaml)"
  local alert=""
  for _ in $(seq 1 60); do
    alert="$(curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/alerts" | jq -c --arg run "$failing" \
      '.data.alerts[] | select(.labels.alertname == "UpgradeRunFailed" and .labels.run == $run and .state == "firing")' || true)"
    [ -n "$alert" ] && break
    sleep 1
  done
  if [ -z "$alert" ]; then echo "UpgradeRunFailed did not fire for $failing" >&2; return 1; fi
  echo "ALERT UpgradeRunFailed firing ($(jq -r '.labels | "severity=\(.severity) plan=\(.plan) run=\(.run) reason=\(.reason)"' <<<"$alert"))"
  jq -r '.annotations | "  summary:     \(.summary)\n  description: \(.description)\n  runbook:     \(.runbook_url)"' <<<"$alert"

  cat <<TXT

The demo is still running. Look around:
  export KUBECONFIG=$TESTENV_DIR/admin.kubeconfig
  export PATH=$(tests/cluster.sh bin):\$PATH   # kubectl of the control plane's release ($("$(tests/cluster.sh bin)/kubectl" version --client | sed -n 's/^Client Version: //p'))
  alias k=$PWD/$BIN/kubectl-upgradeplan   # or put $BIN on PATH and use kubectl upgradeplan
  k get                                   # plans: phase, active run, last result, next run
  k explain redis-v1-to-v2                # the plan in plain words, its windows and problems
  k match redis-v1-to-v2 --resource team-c/cache-8
  k forecast redis-v2-to-v3               # its next run: each group's start, finish and waits
  k history redis-v2-to-v3 $failing       # which resource failed, and Kratix's message
  k status redis-v1-to-v2-demo
  k run redis-v2-to-v3 --preview && k get # a run that snapshots and waits: resume or cancel it
  kubectl describe upgraderun $failing
Metrics:    http://127.0.0.1:$METRICS_PORT/metrics
Prometheus: http://127.0.0.1:$PROM_PORT/alerts (alerts), http://127.0.0.1:$PROM_PORT/graph
Logs:       $TESTENV_DIR/logs/
Stop it with: make demo-stop
TXT
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
