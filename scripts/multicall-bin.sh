#!/usr/bin/env bash
# Makes the multicall form of a build as the black-box tests use it:
#
#   scripts/multicall-bin.sh BUILD_DIR OUT_DIR
#
# OUT_DIR gets BUILD_DIR's cni-rs (hard-linked, else copied) and a link to it
# per plugin (`cni-rs --list`), as the multicall tarball holds them, plus links
# to BUILD_DIR's tools (cnitool, cni-rs-install), which are not in it. Then
#
#   CNI_TEST_BIN_DIR=OUT_DIR cargo test -p tests
#
# runs the black-box suite against the multicall form.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
rm -rf "$out"
mkdir -p "$out"
ln -f "$build/cni-rs" "$out/cni-rs" 2>/dev/null || cp "$build/cni-rs" "$out/cni-rs"
for p in $("$out/cni-rs" --list); do
  ln -s cni-rs "$out/$p"
done
for t in cnitool cni-rs-install; do
  ln -s "$build/$t" "$out/$t"
done
