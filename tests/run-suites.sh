#!/usr/bin/env bash
# tests/run-suites.sh — runs every integration suite whatever fails, then says what happened.
#
#   tests/run-suites.sh [cargo test arguments...]
#
# `cargo test` stops at the first test binary that fails: the suites after it never run, and their
# failures hide behind the first. This runs them all (`--no-fail-fast`), keeps the whole output in
# $SUITES_LOG (target/integration.log), and ends with a table of the suites (tests passed, failed,
# seconds) and one line `integration: N passed, N failed`. SUITES_QUIET=1: cargo's output goes to
# the log alone, the table to the terminal. A suite that crashed before printing its
# result counts as one failure. The exit status is cargo's: non-zero when anything failed.
set -uo pipefail

log="${SUITES_LOG:-target/integration.log}"
mkdir -p "$(dirname "$log")"
if [ -n "${SUITES_QUIET:-}" ]; then
  "${CARGO:-cargo}" test --no-fail-fast "$@" >"$log" 2>&1
  status=$?
else
  "${CARGO:-cargo}" test --no-fail-fast "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
fi

# "     Running tests/controller.rs (target/debug/deps/controller-…)" opens a suite;
# "test result: ok. 17 passed; 0 failed; …; finished in 123.45s" closes it.
awk -v status="$status" '
  function close_suite() {
    if (suite == "") return
    if (!done) { failed_total += 1; printf "  %-28s %6s %6s %9s  (crashed: no result line)\n", suite, "-", "1", "-" }
    suite = ""
  }
  /^ *Running / {
    close_suite()
    suite = ($2 == "unittests") ? $3 : $2; done = 0
    sub(/^tests\//, "", suite); sub(/\.rs$/, "", suite)
    next
  }
  /^test result: / && suite != "" {
    passed = $4; failed = $6; secs = $NF
    sub(/;$/, "", passed); sub(/;$/, "", failed); sub(/s$/, "", secs)
    passed_total += passed; failed_total += failed
    printf "  %-28s %6d %6d %9.1f\n", suite, passed, failed, secs
    done = 1
    next
  }
  BEGIN { printf "\n  %-28s %6s %6s %9s\n", "suite", "passed", "failed", "seconds" }
  END {
    close_suite()
    # cargo failed without any suite failing: the build, or a suite that never started.
    if (status != 0 && failed_total == 0) failed_total = 1
    printf "integration: %d passed, %d failed\n", passed_total, failed_total
  }
' "$log"
exit "$status"
