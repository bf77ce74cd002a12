#!/usr/bin/env bash
# Installs the multicall form into a bin dir for the black-box tests, as a
# node gets it:
#
#   scripts/multicall-bin.sh BUILD_DIR OUT_DIR
#   scripts/multicall-bin.sh cni-rs-multicall-linux-<arch>-v<version>.tgz OUT_DIR [TOOLS_DIR]
#
# From BUILD_DIR (e.g. target/x86_64-unknown-linux-gnu/debug): its cni-rs and a link per plugin
# (`cni-rs --list`) are staged as the multicall tarball holds them; from a
# tarball (scripts/release.sh), its contents. Either way the stage's own
# `cni-rs install OUT_DIR` puts the form into the emptied OUT_DIR. Then links
# to the tools the tests also run (cnitool, cni-rs-install; not in the form)
# are added from TOOLS_DIR (default: BUILD_DIR, or the debug build). Then
#
#   CNI_TEST_BIN_DIR=OUT_DIR cargo test -p tests
#
# runs the black-box suite against the multicall form.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 BUILD_DIR|MULTICALL_TGZ OUT_DIR [TOOLS_DIR]" >&2
  exit 2
fi
src=$1
out=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
if [ -f "$src" ]; then
  tar -xzf "$src" -C "$stage"
  tools=${3:-$repo/target/$(rustc --print host-tuple)/debug}
else
  build=$(cd "$src" && pwd)
  cp "$build/cni-rs" "$stage/cni-rs"
  for p in $("$stage/cni-rs" --list); do
    ln -s cni-rs "$stage/$p"
  done
  tools=${3:-$build}
fi
rm -rf "$out"
mkdir -p "$out"
"$stage/cni-rs" install "$out" >/dev/null
for t in cnitool cni-rs-install; do
  ln -s "$(cd "$tools" && pwd)/$t" "$out/$t"
done
