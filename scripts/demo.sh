#!/usr/bin/env bash
# The demo: builds the suite, makes a throwaway node namespace and two pod
# namespaces, runs a chain through our cnitool against each pod, shows the
# results and traffic, then cleans everything up. Run as root on Debian.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. scripts/deps.sh
need_root "the demo"
ensure_runtime_deps

cargo build --workspace --bins
bin="$repo/target/debug"
tag="cnit-demo-$$"
work=$(mktemp -d)
cleanup() {
  for ns in "$tag-node" "$tag-pod1" "$tag-pod2"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/net.d" "$work/cache"
cat >"$work/net.d/10-demo.conflist" <<JSON
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "plugins": [
    { "type": "loopback" }
  ]
}
JSON

ip netns add "$tag-node"
ip netns add "$tag-pod1"
ip netns add "$tag-pod2"
cnitool() {
  ip netns exec "$tag-node" env NETCONFPATH="$work/net.d" CNI_PATH="$bin" \
    CNI_CACHE_DIR="$work/cache" CNI_IFNAME=lo "$bin/cnitool" "$@"
}

echo "== conflist"; cat "$work/net.d/10-demo.conflist"
for pod in pod1 pod2; do
  echo "== cnitool add demo /run/netns/$tag-$pod"
  cnitool add demo "/run/netns/$tag-$pod"
  echo "== $pod: ip addr show lo"
  ip netns exec "$tag-$pod" ip addr show lo
  echo "== $pod: ping 127.0.0.1"
  ip netns exec "$tag-$pod" ping -c 2 -W 1 127.0.0.1
done
echo "== cnitool check demo, then del demo"
for pod in pod1 pod2; do
  cnitool check demo "/run/netns/$tag-$pod"
  cnitool del demo "/run/netns/$tag-$pod"
  echo "$pod after DEL: $(ip netns exec "$tag-$pod" ip -br link show lo)"
done
echo "== demo done: namespaces and files are removed on exit"
