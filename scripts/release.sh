#!/usr/bin/env bash
# scripts/release.sh [TARGET] — build the plugin's release archive for a Rust target triple
# (default: this machine's), print its sha256, and write the sha256 into krew/upgradeplan.yaml
# (for the platform whose uri names this archive) and into dist/upgradeplan.yaml (below).
#   dist/kubectl-upgradeplan-<triple>.tar.gz   (.zip for windows): kubectl-upgradeplan,
#   kubectl_complete-upgradeplan, LICENSE
# Other targets need their toolchain: rustup target add <triple> (and a linker for it).
set -euo pipefail
cd "$(dirname "$0")/.."
# PROFILE=dev packages a debug build the same way (what the install test uses: the archive, the
# manifest and krew's install steps are what it checks, not the optimiser).
host="$(rustc -vV | sed -n 's/^host: //p')"
target="${1:-$host}"
profile="${PROFILE:-release}"
case "$profile" in dev) dir=debug ;; *) dir="$profile" ;; esac
# CARGO_SELECTION: which packages the build selects (default the plugin alone). `make krew-install`
# selects the workspace with its tests, as the rest of `make test` does, so that its dependencies
# are resolved with the same features and built once.
read -r -a selection <<<"${CARGO_SELECTION:---locked -p kubectl-upgradeplan}"
if [[ $target == "$host" ]]; then
  # This machine's build shares target/<profile> with the rest of the workspace.
  cargo build --profile "$profile" "${selection[@]}"
  out="target/$dir"
else
  cargo build --profile "$profile" "${selection[@]}" --target "$target"
  out="target/$target/$dir"
fi
stage="$(mktemp -d)"; mkdir -p dist
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
# dist/upgradeplan.yaml: the manifest with this archive's sha256 for its platform, to install it
# before (or without) a published release, exactly as krew installs a release:
#   kubectl krew install --manifest=dist/upgradeplan.yaml --archive=dist/<archive>
case "$target" in
  x86_64-*) arch=amd64 ;; aarch64-*) arch=arm64 ;; *) arch="" ;;
esac
case "$target" in
  *-linux-*) os=linux ;; *-apple-darwin) os=darwin ;; *-windows-*) os=windows ;; *) os="" ;;
esac
if [[ -n $os && -n $arch ]]; then
  awk -v sel="matchLabels: {os: $os, arch: $arch}" -v sum="$sum" '
    index($0, sel) { found = 1 }
    found && /sha256: / { sub(/sha256: "[0-9a-f]*"/, "sha256: \"" sum "\""); found = 0 }
    { print }
  ' krew/upgradeplan.yaml >dist/upgradeplan.yaml
  echo "dist/upgradeplan.yaml: $os/$arch -> $(basename "$archive") (kubectl krew install --manifest=dist/upgradeplan.yaml --archive=$archive)"
else
  echo "no krew platform for $target: dist/upgradeplan.yaml not written" >&2
fi
ls -l "$archive"
