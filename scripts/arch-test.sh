#!/usr/bin/env bash
# The architecture test: each ARCH's release form on Debian's kernel of
# that architecture under QEMU (scripts/vm/arch.sh), running the chain
# test tests/arch/chain.sh there: every plugin's VERSION, then bridge +
# host-local + portmap + bandwidth for two pods through cnitool, with
# traffic, and nothing left after DEL.
#
#   scripts/arch-test.sh [--dist DIR] ARCH...
#
#   --dist DIR  the release's artifacts are in DIR (scripts/release.sh
#               passes its own); without it they are built first, the
#               multicall form and cnitool only:
#                 scripts/release.sh --arch ARCH,... --only cni-rs,cnitool
#               into ARCH_TEST_CACHE (default /var/cache/cni-rs-vm/release),
#               whose target dir stays between runs, so that the next run
#               on this machine builds only what changed.
#
# In the guest, /opt/cni/bin holds the multicall tarball's cni-rs and its
# links, and the plugins tarball's cnitool: nothing of this machine's.
# Prints, per ARCH, the multicall binary's size, the guest's boot time and
# the chain's time. Exit status: 0 when every ARCH passed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/suite.sh"
. "$repo/scripts/arch.sh"

dist=
while [ $# -gt 0 ]; do
  case $1 in
  --dist) dist=${2:?--dist needs a directory}; shift 2 ;;
  --dist=*) dist=${1#--dist=}; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--dist DIR] ARCH..." >&2; exit 2; }
for a in "$@"; do arch_target "$a" >/dev/null || exit 2; done
version=$(suite_version)

if [ -z "$dist" ]; then
  cache=${ARCH_TEST_CACHE:-/var/cache/cni-rs-vm/release}
  dist=$cache/dist
  mkdir -p "$cache/target"
  CARGO_TARGET_DIR=$cache/target "$repo/scripts/release.sh" --out "$dist" \
    --arch "$(IFS=,; echo "$*")" --only cni-rs,cnitool --no-kernel-test
fi

status=0
summary=()
for arch in "$@"; do
  files=$(mktemp -d)
  tar -xzf "$dist/cni-rs-multicall-linux-$arch-v$version.tgz" -C "$files" --exclude ./deploy
  tar -xzf "$dist/cni-rs-linux-$arch-v$version.tgz" -C "$files" ./cnitool
  size=$(stat -c %s "$files/cni-rs")
  echo "== $arch: the chain test on Debian's $arch kernel (cni-rs: $size bytes)" >&2
  log=$(mktemp)
  rc=0
  "$repo/scripts/vm/arch.sh" "$arch" "$files" "$repo/tests/arch/chain.sh" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  boot=$(sed -n 's/^==arch-vm: up .*, booted in \([0-9.]*\) s$/\1/p' "$log")
  chain=$(sed -n 's/^ok - nothing left (\([0-9.]*\) s)$/\1/p' "$log")
  qemu=$(sed -n 's/^==arch-vm: QEMU ran \([0-9.]*\) s$/\1/p' "$log")
  if [ "$rc" -eq 0 ] && [ -n "$chain" ]; then
    summary+=("$arch: passed; cni-rs $size bytes, boot ${boot:-?} s, chain $chain s, QEMU ${qemu:-?} s")
  else
    summary+=("$arch: FAILED (exit $rc)")
    status=1
  fi
  rm -rf "$files" "$log"
done
printf 'arch-test: %s\n' "${summary[@]}" >&2
exit $status
