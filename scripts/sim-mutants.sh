#!/usr/bin/env bash
# Shows that the deterministic simulation catches bugs: applies each deliberate engine bug of
# tests/mutants/*.patch, one at a time, to a scratch copy of the repository, runs the
# simulation there, and counts the mutants it caught (a violation found). Ends with
# `mutants: <caught> of <total> caught`; exit 1 unless all are.
#   SIM_MUTANT_HISTORIES (500) histories each (a patch's `Histories: N` header line overrides it:
#   a bug only rare histories reach), from SIM_SEED (1); SIM_MUTANTS="a.patch b.patch" runs only those.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
histories=${SIM_MUTANT_HISTORIES:-500}
seed=${SIM_SEED:-1}
# One target directory for every mutant: only the engine and the simulation rebuild.
target=${CARGO_TARGET_DIR:-$root/target}/mutants
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
caught=0 total=0 missed=()
for patch in ${SIM_MUTANTS:-"$root"/tests/mutants/*.patch}; do
  name=$(basename "$patch" .patch)
  total=$((total + 1))
  rm -rf "$scratch/repo" && mkdir "$scratch/repo"
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$scratch/repo")
  if ! patch -s -d "$scratch/repo" -p1 < "$patch"; then
    echo "mutant $name: does not apply to the current engine (refresh tests/mutants/$name.patch)" >&2
    missed+=("$name (stale)")
    continue
  fi
  (cd "$scratch/repo" && CARGO_TARGET_DIR=$target ${CARGO:-cargo} build -q --locked -p upgradeplan-e2e --bin upgradeplan-sim) >/dev/null
  # A mutant whose bug needs a rare history says how many it takes (a `Histories: N` header line).
  n=$(sed -n 's/^Histories: \([0-9]*\)$/\1/p' "$patch" | head -1)
  out=$(SIM_SEED=$seed SIM_HISTORIES=${n:-$histories} "$target/debug/upgradeplan-sim" 2>&1 || true)
  verdict=$(tail -1 <<<"$out")
  if grep -q '^VIOLATION' <<<"$out"; then
    caught=$((caught + 1))
    echo "mutant $name: caught — $(grep -m1 '^VIOLATION' <<<"$out" | sed 's/^VIOLATION: //')"
  else
    missed+=("$name")
    echo "mutant $name: MISSED ($verdict)"
  fi
done
[ ${#missed[@]} -eq 0 ] || echo "missed: ${missed[*]}"
echo "mutants: $caught of $total caught"
[ "$caught" -eq "$total" ]
