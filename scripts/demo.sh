#!/usr/bin/env bash
# The demo: builds the suite, makes a throwaway node namespace and two pod
# namespaces, runs a chain (loopback, then bridge + host-local + portmap +
# bandwidth) through our cnitool for each pod, shows the results, the node
# state and traffic (pod to pod, and the node to a pod through a host port),
# then DELs everything and cleans up. Run as root on Debian.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. scripts/deps.sh
need_root "the demo"
ensure_runtime_deps

cargo build --workspace --bins
bin=$(build_dir debug)
tag="cnit-demo-$$"
node="$tag-node"
work=$(mktemp -d)
cleanup() {
  # Those not made yet (a failed step) are not there to remove.
  for ns in "$node" "$tag-pod1" "$tag-pod2"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/net.d" "$work/cache" "$work/leases"
cat >"$work/net.d/10-lo.conflist" <<JSON
{ "cniVersion": "1.1.0", "name": "lo", "plugins": [ { "type": "loopback" } ] }
JSON
cat >"$work/net.d/20-demo.conflist" <<JSON
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isDefaultGateway": true, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$work/leases",
                "ranges": [[{ "subnet": "10.88.0.0/24" }], [{ "subnet": "fd88::/64" }]] }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "bandwidth", "capabilities": { "bandwidth": true } }
  ]
}
JSON

ip netns add "$node"
ip netns exec "$node" ip link set lo up
cnitool() {
  ip netns exec "$node" env NETCONFPATH="$work/net.d" CNI_PATH="$bin" \
    CNI_CACHE_DIR="$work/cache" "$bin/cnitool" "$@"
}

echo "== conflist"; cat "$work/net.d/20-demo.conflist"
port=8080
for pod in pod1 pod2; do
  ip netns add "$tag-$pod"
  echo "== cnitool -i lo add lo /run/netns/$tag-$pod"
  cnitool -i lo add lo "/run/netns/$tag-$pod" >/dev/null
  echo "== cnitool add demo /run/netns/$tag-$pod (host port $port -> 80, 50 Mbit/s each way)"
  CAP_ARGS="{\"portMappings\":[{\"hostPort\":$port,\"containerPort\":80,\"protocol\":\"tcp\"}],
             \"bandwidth\":{\"ingressRate\":50000000,\"ingressBurst\":500000,\"egressRate\":50000000,\"egressBurst\":500000}}" \
    cnitool add demo "/run/netns/$tag-$pod" | tee "$work/$pod.json"
  port=$((port + 1))
done

pod_ip() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$1"; }
ip1=$(pod_ip "$work/pod1.json"); ip2=$(pod_ip "$work/pod2.json")
echo "== node: bridge, veths, addresses"
ip netns exec "$node" ip -br addr
echo "== pod1: routes"; ip netns exec "$tag-pod1" ip route
echo "== ping pod1 ($ip1) -> pod2 ($ip2)"
ip netns exec "$tag-pod1" ping -c 2 -W 1 "$ip2"

echo "== node -> 127.0.0.1:8080 (host port of pod1) reaches pod1:80"
ip netns exec "$tag-pod1" python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80)); s.listen(1); s.settimeout(10)
c, peer = s.accept(); c.sendall(b"hello from pod1\n"); c.close()' &
listener=$!
for _ in $(seq 50); do ip netns exec "$tag-pod1" ss -ltn | grep -q ':80 ' && break; sleep 0.1; done
ip netns exec "$node" python3 -c '
import socket
print(socket.create_connection(("127.0.0.1", 8080), timeout=5).recv(100).decode().strip())'
wait $listener

echo "== cnitool check, then del, for each pod"
for pod in pod1 pod2; do
  cnitool check demo "/run/netns/$tag-$pod"
  cnitool del demo "/run/netns/$tag-$pod"
  cnitool -i lo del lo "/run/netns/$tag-$pod"
done
echo "== node after DEL: links and leases"
ip netns exec "$node" ip -br link
ls -A "$work/leases/demo"
echo "== demo done: namespaces and files are removed on exit"
