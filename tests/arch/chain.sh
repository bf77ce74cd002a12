#!/bin/sh
# The architecture test's guest side: PID 1 of scripts/vm/arch.sh runs it,
# under busybox sh on Debian's kernel of one architecture, in
# /opt/cni/bin, which holds that architecture's release form: the
# multicall tarball (cni-rs and a link per plugin) and cnitool of the
# plugins tarball. scripts/arch-test.sh boots it.
#
# It checks, and fails at the first thing that is not so:
#   - `cni-rs --list` names exactly the tarball's links, and every plugin
#     answers VERSION;
#   - a bridge (ipMasq, nftables) + host-local + portmap (nftables) +
#     bandwidth chain through cnitool, for two pods: ADD, CHECK, a ping
#     from one to the other, a TCP connection through the host port to
#     the first, the bandwidth's qdiscs and the nft rules in place;
#   - DEL of both, then nothing left: no veth or ifb link, no lease, no
#     cached result, no rule naming a pod's address or the host port.
# Each step prints "ok - ..." with the time since the chain began.
set -u
export PATH=/opt/cni/bin:/bin:/sbin:/usr/bin:/usr/sbin
export CNI_PATH=/opt/cni/bin NETCONFPATH=/etc/cni/net.d

fail() {
	echo "not ok - $*"
	exit 1
}
t0=$(cut -d' ' -f1 /proc/uptime)
ok() { echo "ok - $* ($(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f s", b - a }'))"; }

# The form: a link per plugin, and nothing else the binary serves.
links=$(for f in *; do [ "$(readlink "$f")" = cni-rs ] && echo "$f"; done | sort | tr '\n' ' ')
listed=$(./cni-rs --list 2>&1 | sort | tr '\n' ' ') || fail "cni-rs --list: $listed"
[ "$links" = "$listed" ] || fail "the links ($links) are not what cni-rs serves ($listed)"
n=0
for p in $links; do
	out=$(CNI_COMMAND=VERSION "./$p" </dev/null 2>&1) || fail "$p VERSION: $out"
	case $out in *'"supportedVersions"'*'"1.1.0"'*) ;; *) fail "$p VERSION printed: $out" ;; esac
	n=$((n + 1))
done
[ "$n" -ge 20 ] || fail "only $n plugins: $links"
ok "$n plugins answer VERSION"
./cnitool --version >/dev/null || fail "cnitool --version"

cat >/etc/cni/net.d/10-chain.conflist <<'EOF'
{
  "cniVersion": "1.1.0",
  "name": "chain",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni-arch0",
      "isGateway": true,
      "ipMasq": true,
      "ipMasqBackend": "nftables",
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "10.88.7.0/24" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "backend": "nftables", "capabilities": { "portMappings": true } },
    {
      "type": "bandwidth",
      "ingressRate": 100000000, "ingressBurst": 1000000,
      "egressRate": 100000000, "egressBurst": 1000000
    }
  ]
}
EOF

mkdir -p /run/netns
for pod in pod1 pod2; do
	: >"/run/netns/$pod"
	unshare --net="/run/netns/$pod" true || fail "cannot make the namespace $pod"
	nsenter --net="/run/netns/$pod" ip link set lo up
done

export CAP_ARGS='{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}'
r1=$(cnitool add chain /run/netns/pod1 2>&1) || fail "ADD pod1: $r1"
unset CAP_ARGS
r2=$(cnitool add chain /run/netns/pod2 2>&1) || fail "ADD pod2: $r2"
ip_of() { echo "$1" | tr -d ' \n' | sed -n 's|.*"address":"\([0-9.]*\)/24".*|\1|p'; }
ip1=$(ip_of "$r1")
ip2=$(ip_of "$r2")
case "$ip1,$ip2" in 10.88.7.*,10.88.7.*) ;; *) fail "ADD results without addresses: $r1 $r2" ;; esac
[ "$ip1" != "$ip2" ] || fail "both pods got $ip1"
ok "ADD pod1 ($ip1) and pod2 ($ip2)"

out=$(cnitool check chain /run/netns/pod1 2>&1) || fail "CHECK pod1: $out"
out=$(cnitool check chain /run/netns/pod2 2>&1) || fail "CHECK pod2: $out"
ok "CHECK both"

nsenter --net=/run/netns/pod1 ping -c 2 -W 3 "$ip2" >/dev/null || fail "no ping from pod1 to pod2"
nsenter --net=/run/netns/pod2 ping -c 2 -W 3 "$ip1" >/dev/null || fail "no ping from pod2 to pod1"
ok "ping between the pods"

nsenter --net=/run/netns/pod1 nc -l -p 80 -e echo "pong from pod1" &
server=$!
i=0
until nsenter --net=/run/netns/pod1 netstat -ltn 2>/dev/null | grep -q ':80 '; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || fail "the server in pod1 never listened"
	sleep 0.1
done
got=$(echo | nc -w 5 10.88.7.1 8080 2>&1)
[ "$got" = "pong from pod1" ] || fail "through host port 8080: '$got'"
kill "$server" 2>/dev/null
ok "TCP through host port 8080 to pod1"

rules=$(nft list ruleset 2>&1) || fail "nft list ruleset: $rules"
echo "$rules" | grep -q "dport 8080" || fail "no host-port rule in: $rules"
echo "$rules" | grep -q "masquerade" || fail "no masquerade rule in: $rules"
qdiscs=$(tc qdisc show 2>&1)
echo "$qdiscs" | grep -q tbf || fail "no tbf qdisc (bandwidth) in: $qdiscs"
ip -o link show | grep -q ifb || fail "no ifb link (bandwidth's ingress)"
ok "nft rules and bandwidth qdiscs in place"

out=$(cnitool del chain /run/netns/pod1 2>&1) || fail "DEL pod1: $out"
out=$(cnitool del chain /run/netns/pod2 2>&1) || fail "DEL pod2: $out"
out=$(cnitool del chain /run/netns/pod2 2>&1) || fail "a second DEL of pod2: $out"
ok "DEL both, and again"

# Only lo, the bridge (kept, as Go's plugin keeps it) and the ifb module's
# own ifb0 and ifb1 (numifbs=2, made when it loads) may be left.
left=$(ip -o link show | sed -n 's/^[0-9]*: \([^:@]*\).*/\1/p' | grep -v -x -e lo -e cni-arch0 -e ifb0 -e ifb1)
[ -z "$left" ] || fail "links left: $left"
leases=$(ls /var/lib/cni/networks/chain 2>/dev/null | grep -v -e '^lock$' -e '^last_reserved_ip')
[ -z "$leases" ] || fail "leases left: $leases"
cached=$(ls /var/lib/cni/results 2>/dev/null)
[ -z "$cached" ] || fail "cached results left: $cached"
rules=$(nft list ruleset 2>&1)
for word in "$ip1" "$ip2" 8080; do
	echo "$rules" | grep -q -F "$word" && fail "a rule naming $word is left: $rules"
done
ok "nothing left"
