#!/usr/bin/env bash
# Writes the alert rules for your installation: rules.yaml (plain Prometheus) and
# prometheusrule.yaml (Prometheus Operator) into OUT_DIR, from deploy/monitoring/rules.yaml with
#   RUNBOOK_BASE  where docs/runbooks.md is published for your team (each runbook_url is
#                 RUNBOOK_BASE#<alert in lower case>); default: the project's copy on GitHub
#   FAILED_FOR    how long UpgradeRunFailed stays firing after a failed run (a Prometheus
#                 duration: 30m, 2h, 1d); default 1h
#   BUDGET_HELD_FOR  how long an UpgradeBudget holds a run before UpgradeRunBudgetHeld fires;
#                 default 2h
# With no OUT_DIR it rewrites deploy/monitoring/prometheusrule.yaml from rules.yaml (the
# committed copy; a test checks they agree).
#
#   RUNBOOK_BASE=https://wiki.example.com/upgradeplan/runbooks FAILED_FOR=4h scripts/monitoring-rules.sh out/
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_BASE=https://github.com/upgradeplan/upgradeplan/blob/main/docs/runbooks.md
base=${RUNBOOK_BASE:-$DEFAULT_BASE}
failed_for=${FAILED_FOR:-1h}
held_for=${BUDGET_HELD_FOR:-2h}
out=${1:-}
for setting in "FAILED_FOR=$failed_for" "BUDGET_HELD_FOR=$held_for"; do
  if ! [[ ${setting#*=} =~ ^([0-9]+(ms|s|m|h|d|w|y))+$ ]]; then
    echo "$setting is not a Prometheus duration (e.g. 30m, 2h, 1d)" >&2
    exit 2
  fi
done
if [[ $base == *'#'* || $base == *'|'* || -z $base ]]; then
  echo "RUNBOOK_BASE=$base: give the address of the runbooks page, without '#' (anchors are added)" >&2
  exit 2
fi

rules() {
  sed -e "s|$DEFAULT_BASE#|$base#|" \
      -e "s|^\(        keep_firing_for:\) 1h$|\1 $failed_for|" \
      -e "/alert: UpgradeRunBudgetHeld$/,/for:/ s|^\(        for:\) 2h$|\1 $held_for|" deploy/monitoring/rules.yaml
}

operator() {
  cat <<'HEADER'
# The alerts of deploy/monitoring/rules.yaml for the Prometheus Operator (a test keeps them identical;
# scripts/monitoring-rules.sh writes this file).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: upgradeplan
  labels:
    app.kubernetes.io/name: upgradeplan-controller
    app.kubernetes.io/part-of: upgradeplan
spec:
HEADER
  rules | sed -n '/^groups:/,$p' | sed 's/^/  /'
}

if [[ -z $out ]]; then
  operator > deploy/monitoring/prometheusrule.yaml
  exit 0
fi
mkdir -p "$out"
if [[ $(cd "$out" && pwd -P) == "$(cd deploy/monitoring && pwd -P)" ]]; then
  echo "OUT_DIR is deploy/monitoring, where rules.yaml is the source: give another directory (or none, to rewrite prometheusrule.yaml)" >&2
  exit 2
fi
rules > "$out/rules.yaml"
operator > "$out/prometheusrule.yaml"
echo "wrote $out/rules.yaml and $out/prometheusrule.yaml (runbooks at $base, UpgradeRunFailed kept $failed_for, UpgradeRunBudgetHeld after $held_for)"
