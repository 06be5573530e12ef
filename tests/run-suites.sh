#!/usr/bin/env bash
# tests/run-suites.sh — runs every integration suite whatever fails, then says what happened.
#
#   tests/run-suites.sh [cargo test arguments...] [-- test binary arguments...]
#
# `cargo test` runs its test binaries one after another and stops at the first that fails: the
# suites after it never run, and their failures hide behind the first. This builds the suites
# (`cargo test --no-run`), then runs every binary, SUITES_JOBS (default 3) at a time — each suite
# makes its own world (namespaces, Promise, controllers) on the shared control plane, and most of
# their time is waiting on the simulated Kratix, so they overlap well even on two cores. Each
# suite's output goes to its own file; the log ($SUITES_LOG, target/integration.log) holds them
# all, suite by suite, in name order. It ends with a table of the suites (tests passed, failed,
# seconds) and one line `integration: N passed, N failed`. SUITES_QUIET=1: each suite's output
# goes to the log alone, the table to the terminal. A suite that crashed before printing its
# result counts as one failure. The exit status is non-zero when anything failed.
set -uo pipefail

log="${SUITES_LOG:-target/integration.log}"
jobs="${SUITES_JOBS:-3}"
mkdir -p "$(dirname "$log")"
cargo_args=() test_args=()
seen_separator=
for a in "$@"; do
  if [ -z "$seen_separator" ] && [ "$a" = "--" ]; then seen_separator=1; continue; fi
  if [ -n "$seen_separator" ]; then test_args+=("$a"); else cargo_args+=("$a"); fi
done

out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT

# Build every suite and learn its binary: cargo says "Executable tests/<suite>.rs (<path>)" (the
# source relative to its package; only the suites are selected).
if ! "${CARGO:-cargo}" test --no-run "${cargo_args[@]}" >"$out_dir/build.log" 2>&1; then
  cp "$out_dir/build.log" "$log"
  cat "$out_dir/build.log" >&2
  echo "integration: 0 passed, 1 failed (the build failed)"
  exit 1
fi
sed -n 's|^ *Executable tests/\([^ /]*\)\.rs (\(.*\))$|\1 \2|p' "$out_dir/build.log" | sort >"$out_dir/suites"
if [ ! -s "$out_dir/suites" ]; then
  cat "$out_dir/build.log" >&2
  echo "integration: 0 passed, 1 failed (no suite was built)"
  exit 1
fi

# Run them, `jobs` at a time, from the suites' package directory (as `cargo test` does); each
# writes <suite>.out and <suite>.rc.
package_dir="$(cd "$(dirname "$0")" && pwd)"
workspace_dir="$(pwd)"
run_one() {
  local suite=$1 exe=$2
  case $exe in /*) ;; *) exe="$workspace_dir/$exe" ;; esac
  (cd "$package_dir" && "$exe" "${test_args[@]}") >"$out_dir/$suite.out" 2>&1
  echo $? >"$out_dir/$suite.rc"
  [ -n "${SUITES_QUIET:-}" ] || echo "  finished $suite (exit $(cat "$out_dir/$suite.rc"))"
}
export -f run_one
export out_dir package_dir workspace_dir
export SUITES_QUIET="${SUITES_QUIET:-}"
started=$(date +%s)
# One line per suite to xargs; each job gets the test arguments back from their quoted form.
xargs -P "$jobs" -L 1 bash -c 'eval "test_args=($0)"; run_one "$1" "$2"' "$(printf '%q ' "${test_args[@]}")" <"$out_dir/suites"
wall=$(( $(date +%s) - started ))

status=0
: >"$log"
while read -r suite _; do
  {
    echo "     Running tests/$suite.rs"
    cat "$out_dir/$suite.out"
  } >>"$log"
  [ "$(cat "$out_dir/$suite.rc" 2>/dev/null || echo 1)" = 0 ] || status=1
done <"$out_dir/suites"
[ -n "${SUITES_QUIET:-}" ] || cat "$log"

# "     Running tests/controller.rs" opens a suite;
# "test result: ok. 17 passed; 0 failed; …; finished in 123.45s" closes it.
awk -v status="$status" -v wall="$wall" -v jobs="$jobs" '
  function close_suite() {
    if (suite == "") return
    if (!done) { failed_total += 1; printf "  %-28s %6s %6s %9s  (crashed: no result line)\n", suite, "-", "1", "-" }
    suite = ""
  }
  /^ *Running / {
    close_suite()
    suite = $2; done = 0
    sub(/^tests\//, "", suite); sub(/\.rs$/, "", suite)
    next
  }
  /^test result: / && suite != "" {
    passed = $4; failed = $6; secs = $NF
    sub(/;$/, "", passed); sub(/;$/, "", failed); sub(/s$/, "", secs)
    passed_total += passed; failed_total += failed; summed += secs
    printf "  %-28s %6d %6d %9.1f\n", suite, passed, failed, secs
    done = 1
    next
  }
  BEGIN { printf "\n  %-28s %6s %6s %9s\n", "suite", "passed", "failed", "seconds" }
  END {
    close_suite()
    if (status != 0 && failed_total == 0) failed_total = 1
    printf "  (%d s summed over the suites, %d s of wall time, %d at a time)\n", summed, wall, jobs
    printf "integration: %d passed, %d failed\n", passed_total, failed_total
  }
' "$log"
exit "$status"
