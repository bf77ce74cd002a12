#!/usr/bin/env bash
# Switching a node by hand, with the other side's real binaries: one pod
# ADDed by one side and DELed by the other, through Go's libcni
# (go-cnitool), on bridge (ipMasq) and ptp (ipMasq) chains with
# host-local, portmap (snat, a TCP and a UDP mapping), firewall, tuning and
# bandwidth, for each backend setting: none named, nftables, iptables.
# Prints one line per case, "clean" or what the pod left in the node's
# namespace (rules naming its address or container ID, veths, IFBs,
# leases). Exits 1 when a case failed or leaked.
#
#   scripts/switch-check.sh OTHER_BIN_DIR [OUR_BIN_DIR]
#
# OTHER_BIN_DIR: Debian's Go plugins (/usr/lib/cni), or upstream's built
# from a checkout (`./build_linux.sh`, then its bin/). OUR_BIN_DIR defaults
# to the debug build (built here). BACKENDS and MAINS narrow the cases
# (e.g. BACKENDS=none MAINS=ptp). Run as root; everything happens in
# throwaway namespaces with private /var/lib/cni and /run/cni.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/deps.sh"
need_root "the switching check"
[ $# -ge 1 ] || { echo "usage: $0 OTHER_BIN_DIR [OUR_BIN_DIR]" >&2; exit 2; }
other=$(realpath "$1")
ours=$(realpath "${2:-$(build_dir debug)}")
if [ $# -lt 2 ]; then (cd "$repo" && cargo build -q --workspace --bins) || exit 1; fi
ensure_reference_tools
command -v go-cnitool >/dev/null || { echo "error: go-cnitool is needed" >&2; exit 1; }

tag="cnit-switch-$$"
node="$tag-node" pod="$tag-pod" cid="switch$$"
work=$(mktemp -d)
cleanup() {
  # Either may not be there yet (or any more).
  ip netns del "$pod" 2>/dev/null
  ip netns del "$node" 2>/dev/null
  rm -rf "$work/state"
}
trap 'cleanup; rm -rf "$work"' EXIT

# A command in the node namespace with the node's state dirs private.
in_node() {
  ip netns exec "$node" unshare -m sh -c \
    'mount --bind "$0/var" /var/lib/cni && mount --bind "$0/run" /run/cni && exec "$@"' \
    "$work/state" "$@"
}

write_conflist() { # backend-setting main-plugin
  local pm="" masq="" fw=""
  case $1 in
    nftables | iptables) pm="\"backend\": \"$1\"," masq="\"ipMasqBackend\": \"$1\"," fw=", \"backend\": \"$1\"" ;;
  esac
  local ipam='"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24"}]]}'
  local main="{\"type\": \"ptp\", \"ipMasq\": true, $masq $ipam}"
  [ "$2" = bridge ] &&
    main="{\"type\": \"bridge\", \"bridge\": \"sw0\", \"isGateway\": true, \"ipMasq\": true, $masq $ipam}"
  cat >"$work/state/conf/10-switch.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "switchnet", "plugins": [
  $main,
  {"type": "portmap", $pm "snat": true, "capabilities": {"portMappings": true}},
  {"type": "firewall" $fw},
  {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}},
  {"type": "bandwidth", "capabilities": {"bandwidth": true}}
]}
JSON
}

cni() { # bin-dir verb
  in_node env NETCONFPATH="$work/state/conf" CNI_PATH="$1" CNI_CONTAINERID="$cid" \
    CAP_ARGS='{"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
      {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}],
      "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000,
      "egressRate": 1000000, "egressBurst": 100000}}' \
    go-cnitool "$2" switchnet "/var/run/netns/$pod"
}

# What a DEL left: rules, links and leases of the pod. A listing that
# fails fails the check (it would read as "nothing left"); grep finding
# nothing is the good case.
leftovers() {
  local rules links
  rules=$(ip netns exec "$node" nft list ruleset) || { echo "error: nft list ruleset failed" >&2; exit 1; }
  links=$(ip -n "$node" -o link show) || { echo "error: ip link show failed" >&2; exit 1; }
  grep -E "$cid|10\.77\.0\.[1-9][0-9]*([^0-9]|$)|CNI-DN-" <<<"$rules" | sed 's/^[[:space:]]*/rule: /' || [ $? -eq 1 ]
  grep -oE '^[0-9]+: (veth|ifb|bwp)[^:@]*' <<<"$links" | sed 's/^/link: /' || [ $? -eq 1 ]
  if [ -d "$work/state/var/networks" ]; then
    find "$work/state/var/networks" -type f ! -name 'last_reserved_ip*' ! -name lock | sed 's/^/lease: /' ||
      { echo "error: listing the leases failed" >&2; exit 1; }
  fi
}

failed=0
one_case() { # backend-setting main-plugin add-side del-side
  local add_dir=$ours del_dir=$other out left what="$1 $2: $3 ADD, $4 DEL"
  [ "$3" = other ] && add_dir=$other del_dir=$ours
  cleanup
  mkdir -p "$work/state/var" "$work/state/run" "$work/state/conf"
  ip netns add "$node" && ip netns add "$pod" || exit 1
  ip -n "$node" link set lo up
  ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1
  write_conflist "$1" "$2"
  if ! out=$(cni "$add_dir" add 2>&1); then
    echo "$what: ADD failed: $out"
    failed=1
    return
  fi
  if ! out=$(cni "$del_dir" del 2>&1); then
    echo "$what: DEL failed: ${out:0:300}"
    failed=1
  fi
  left=$(leftovers) || exit 1
  if [ -n "$left" ]; then
    echo "$what: LEFT"
    sed 's/^/    /' <<<"$left"
    failed=1
  else
    echo "$what: clean"
  fi
}

echo "ours: $ours; other: $other ($("$other/portmap" 2>&1 </dev/null | head -1))"
for backend in ${BACKENDS:-none nftables iptables}; do
  for main in ${MAINS:-bridge ptp}; do
    one_case "$backend" "$main" ours other
    one_case "$backend" "$main" other ours
  done
done
exit $failed
