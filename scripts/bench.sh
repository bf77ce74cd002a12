#!/usr/bin/env bash
# The benchmark of issue 8: our release plugins against the Go reference
# plugins (Debian's containernetworking-plugins, /usr/lib/cni), in throwaway
# network namespaces. Writes bench/RESULTS.md and bench/latency-vs-pods.svg.
# Installs what it needs; run as root on Debian. Arguments go to cni-bench
# (--quick for a short check, --iterations N, ...; see --help). The full run
# takes about 25 minutes on 2 cores, the two release builds before it about
# 15 from scratch.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. scripts/deps.sh
need_root "the benchmark"
ensure_runtime_deps
[ -x /usr/lib/cni/bridge ] || apt_install containernetworking-plugins
ensure_cmd strace strace
# The no-op floor's plugin is a static C program, built by cni-bench.
ensure_cmd cc gcc
[ -f "$(cc -print-file-name=libc.a)" ] || apt_install libc6-dev

# Namespaces and temp dirs of an earlier run that was killed with SIGKILL
# (its guard never ran): those whose process is gone.
# One may go meanwhile (its owner ended just now and another run removed it).
for ns in $(ended_namespaces); do ip netns del "$ns" || true; done
for dir in "${TMPDIR:-/tmp}"/cnit-bench-*; do
  [ -d "$dir" ] || continue
  if namespace_owner_ended "$(basename "$dir")"; then rm -rf "$dir"; fi
done
before=$(throwaway_namespaces | tr '\n' ' ')

# Ours, static as released, and the same plugins dynamic (RUSTFLAGS=""
# replaces .cargo/config.toml's crt-static), measured against each other.
# The binaries as they ship: without `tests`, whose fault-points hook the
# release leaves out.
cargo build --release --workspace --exclude tests --exclude cri-client --bins
RUSTFLAGS="" cargo build --release --workspace --exclude tests --exclude cri-client --bins \
  --target-dir target/dynamic
dynamic=$repo/target/dynamic/$(rustc --print host-tuple)/release
status=0
"$(build_dir release)/cni-bench" --dynamic "$dynamic" "$@" || status=$?

# The cost of a metrics scrape (cni-bench-scrape), in a namespace of its
# own, appended to the results.
scrape_ns=cnit-bench-$$-scrape
ip netns add "$scrape_ns"
ip netns exec "$scrape_ns" ip link set lo up
if ip netns exec "$scrape_ns" "$(build_dir release)/cni-bench-scrape" "$(build_dir release)/cni-rs" \
  > target/scrape.md; then
  { echo; cat target/scrape.md; } >> bench/RESULTS.md
else
  status=1
fi
ip netns del "$scrape_ns"

left=$(ended_namespaces_since "$before")
if [ -n "$left" ]; then
  echo "error: benchmark namespaces left behind:" $left >&2
  status=1
fi
exit $status
