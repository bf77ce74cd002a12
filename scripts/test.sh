#!/usr/bin/env bash
# The whole test suite: unit tests and black-box tests in throwaway network
# namespaces. Installs what it needs; run as root on Debian.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. scripts/deps.sh
need_root "the test suite"
ensure_runtime_deps
ensure_reference_tools
ensure_release_test_deps
ensure_firewalld

cargo build --workspace --bins
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?

# Every test namespace (cnit-<pid>-<n>-<tag>) must be gone, whatever happened.
left=$(ip netns list | awk '{print $1}' | grep '^cnit-[0-9]' || true)
if [ -n "$left" ]; then
  echo "error: test namespaces left behind:" $left >&2
  for ns in $left; do ip netns del "$ns" || true; done
  status=1
fi
exit $status
