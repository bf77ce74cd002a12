#!/bin/bash
# PID 1 in the full-kernel VM, after the initramfs (scripts/vm/init) switched
# to the host's root. /run/vm is the hand-over share of scripts/vm/run.sh:
# argv, env and cwd in (NUL-separated), stdin, and out: stdout, stderr, rc.
# Ends by powering the VM off, whatever the command did.
vm=/run/vm
exec </dev/null >>"$vm/stdout" 2>>"$vm/stderr"

hostname fullkernel
ip link set lo up
# The device nodes whose module loads on first open (/dev/net/tun, ...), as
# systemd-tmpfiles makes them on a booted system: there is no udev here.
# modules.devname lines: "tun net/tun c10:200".
while read -r _ node dev; do
	case $node in '' | \#*) continue ;; esac
	mkdir -p "/dev/$(dirname "$node")"
	major=${dev%%:*}
	mknod -m 0666 "/dev/$node" "${major:0:1}" "${major:1}" "${dev#*:}" 2>/dev/null
done <"/lib/modules/$(uname -r)/modules.devname"

# The command's environment is the host caller's, less what names the
# shell's own state.
while IFS= read -r -d '' pair; do
	name=${pair%%=*}
	case $name in PWD | OLDPWD | SHLVL | _ | HOSTNAME) continue ;; esac
	[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && export "$pair"
done <"$vm/env"
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac
export FULLKERNEL_GUEST=1
mapfile -d '' -t argv <"$vm/argv"

rc=125
if cd "$(cat "$vm/cwd")"; then
	# Not exec: PID 1 stays to write the status and power off.
	"${argv[@]}" <"$vm/stdin"
	rc=$?
else
	echo "fullkernel: cannot enter $(cat "$vm/cwd") in the guest" >&2
fi
echo "$rc" >"$vm/rc.tmp" && mv "$vm/rc.tmp" "$vm/rc"
sync
echo o >/proc/sysrq-trigger
sleep 10
