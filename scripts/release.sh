#!/usr/bin/env bash
# scripts/release.sh [TARGET] — build the plugin's release archive for a Rust target triple
# (default: this machine's), print its sha256, and write the sha256 into krew/upgradeplan.yaml.
#   dist/kubectl-upgradeplan-<triple>.tar.gz   (.zip for windows): kubectl-upgradeplan,
#   kubectl_complete-upgradeplan, LICENSE
# Other targets need their toolchain: rustup target add <triple> (and a linker for it).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-$(rustc -vV | sed -n 's/^host: //p')}"
cargo build --release --locked -p kubectl-upgradeplan --target "$target"
out="target/$target/release"; stage="$(mktemp -d)"; mkdir -p dist
exe=""; case "$target" in *windows*) exe=".exe" ;; esac
cp "$out/kubectl-upgradeplan$exe" "$out/kubectl_complete-upgradeplan$exe" LICENSE "$stage/"
case "$target" in
  *windows*) archive="dist/kubectl-upgradeplan-$target.zip"; (cd "$stage" && zip -q -r - .) >"$archive" ;;
  *) archive="dist/kubectl-upgradeplan-$target.tar.gz"; tar -czf "$archive" -C "$stage" . ;;
esac
rm -rf "$stage"
sum="$(sha256sum "$archive" | cut -d' ' -f1)"
echo "$sum  $archive" | tee "$archive.sha256"
# The manifest's sha256 line follows the uri line of this archive.
name="$(basename "$archive")"
awk -v name="$name" -v sum="$sum" '
  index($0, name) { print; getline; sub(/sha256: "[0-9a-f]*"/, "sha256: \"" sum "\""); print; next } { print }
' krew/upgradeplan.yaml >krew/upgradeplan.yaml.tmp && mv krew/upgradeplan.yaml.tmp krew/upgradeplan.yaml
ls -l "$archive"
