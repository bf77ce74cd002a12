#!/usr/bin/env bash
# scripts/vm/run.sh [--] CMD [ARG...]
#
# Runs CMD as root in a throwaway QEMU VM booting Debian's full kernel
# (linux-image-amd64: 802.1Q VLAN, ipvlan, dummy, VRF, bridge VLAN filtering,
# which this machine's kernel lacks), with this machine's own filesystem as
# its root: read-only 9p under a tmpfs overlay, so the binaries built here,
# /usr/bin/ip and /usr/lib/cni run there unchanged and every write is thrown
# away. CMD gets the caller's cwd, environment (plus FULLKERNEL_GUEST=1) and
# stdin (read whole first, as ssh does); its stdout and stderr stream back,
# and its exit status is this script's.
#
# Exit status: CMD's; 255 when the guest died before CMD ended; 125 when this
# script failed (install, boot files, QEMU).
#
# Settings (environment):
#   FULLKERNEL_RW=DIR[:DIR...]  host dirs mounted read-write (writes stay)
#   FULLKERNEL_MEM=2G, FULLKERNEL_CPUS=2
#   FULLKERNEL_KVER=6.1.0-NN-amd64  a kernel of /boot (default: the newest)
#   FULLKERNEL_VERBOSE=1        the guest kernel's console on stderr
#   FULLKERNEL_CACHE=/var/cache/cni-rs-vm  the initramfs and unpacked kernel
#
# What it installs when missing (apt): qemu-system-x86, linux-image-amd64,
# busybox-static, cpio. No KVM is used: these machines' /dev/kvm runs only
# PVM guests, so the guest is emulated (TCG): a boot is about 10 s, and
# CPU-bound work is several times slower than on the host.
# Not `set -e`: every step that must work is checked (`|| die`), and the
# guest's exit status is read, not fatal. pipefail: a pipe fails with any
# of its commands.
set -uo pipefail
me=fullkernel
here=$(cd "$(dirname "$0")" && pwd)
cache=${FULLKERNEL_CACHE:-/var/cache/cni-rs-vm}
die() {
	echo "$me: $*" >&2
	exit 125
}

[ "${1:-}" = -- ] && shift
[ $# -ge 1 ] || {
	echo "usage: $0 [--] CMD [ARG...]" >&2
	exit 2
}
[ "$(id -u)" = 0 ] || die "needs root"

newest_kernel() {
	local v best=
	for v in $(ls /boot/vmlinuz-*-amd64 2>/dev/null | sed 's|^/boot/vmlinuz-||' | sort -V); do
		[ -f "/lib/modules/$v/modules.dep" ] && best=$v
	done
	echo "$best"
}

install_missing() {
	local pkgs=() log
	command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
	[ -n "${FULLKERNEL_KVER:-}$(newest_kernel)" ] || pkgs+=(linux-image-amd64)
	[ -x /bin/busybox ] || pkgs+=(busybox-static)
	command -v cpio >/dev/null || pkgs+=(cpio)
	command -v modprobe >/dev/null || pkgs+=(kmod)
	[ ${#pkgs[@]} -eq 0 ] && return
	log=$(mktemp)
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; } >"$log" 2>&1; then
		tail -20 "$log" >&2
		rm -f "$log"
		die "apt-get install ${pkgs[*]} failed"
	fi
	rm -f "$log"
}

# The kernel image QEMU boots. Under TCG, the bzImage's decompressor costs
# seconds at every boot, so the ELF vmlinux inside it (xz, as Debian
# compresses it) is unpacked once and booted through its PVH entry point.
kernel_image() {
	local bz=/boot/vmlinuz-$1 elf=$cache/vmlinux-$1
	if [ ! -s "$elf" ]; then
		# A kernel that is no xz bzImage boots as it is (slower): the
		# unpacking may fail, and says nothing.
		python3 - "$bz" "$elf.tmp" <<-'PY' 2>/dev/null && mv -f "$elf.tmp" "$elf"
			import lzma, sys
			data = open(sys.argv[1], "rb").read()
			start = data.find(b"\xfd7zXZ\x00")
			if start < 0:
			    sys.exit(1)
			out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
			if out[:4] != b"\x7fELF":
			    sys.exit(1)
			open(sys.argv[2], "wb").write(out)
		PY
		rm -f "$elf.tmp"
	fi
	if [ -s "$elf" ]; then echo "$elf"; else echo "$bz"; fi
}

# The initramfs: busybox, scripts/vm/init and the modules that mount 9p
# over virtio and overlayfs, with their dependencies in load order. Rebuilt
# when the kernel or the init script changes.
initramfs() {
	local kver=$1 key img root m
	key=$(cat "$here/init" | sha256sum | cut -c1-16)
	img=$cache/initramfs-$kver-$key.cpio.gz
	if [ ! -s "$img" ]; then
		root=$(mktemp -d) || die "mktemp failed"
		mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/lib/modules" &&
			cp /bin/busybox "$root/bin/busybox" && cp "$here/init" "$root/init" &&
			chmod 755 "$root/init" || die "cannot stage the initramfs in $root"
		# Every step checked: a half-built initramfs would be cached.
		for m in virtio_pci 9pnet_virtio 9p overlay; do
			modprobe --show-depends -S "$kver" "$m" || die "module $m not found for $kver"
		done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$root/.files" ||
			die "cannot resolve the modules for $kver"
		while read -r m; do
			cp "$m" "$root/lib/modules/" || die "cannot copy module $m"
			echo "/lib/modules/$(basename "$m")"
		done <"$root/.files" >"$root/modules" || die "cannot list the modules"
		rm -f "$root/.files"
		(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$img.tmp" ||
			die "cannot build the initramfs"
		mv -f "$img.tmp" "$img"
		rm -rf "$root"
	fi
	echo "$img"
}

mkdir -p "$cache" || die "cannot create $cache"
exec 9>"$cache/.lock" # one installer at a time
flock 9 || die "cannot lock $cache/.lock"
install_missing
kver=${FULLKERNEL_KVER:-$(newest_kernel)}
[ -n "$kver" ] && [ -f "/boot/vmlinuz-$kver" ] && [ -f "/lib/modules/$kver/modules.dep" ] ||
	die "no Debian kernel with modules in /boot and /lib/modules (${FULLKERNEL_KVER:-newest})"
kernel=$(kernel_image "$kver")
initrd=$(initramfs "$kver") || exit 125
exec 9>&-

# The hand-over share: what guest.sh reads and writes.
work=$(mktemp -d /tmp/fullkernel.XXXXXX) || die "mktemp failed"
qemu_pid= relay_pids=()
cleanup() {
	trap - EXIT INT TERM HUP
	[ -n "$qemu_pid" ] && kill -KILL "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null
	[ ${#relay_pids[@]} -gt 0 ] && wait "${relay_pids[@]}" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

cp "$here/guest.sh" "$work/guest.sh"
printf '%s\0' "$@" >"$work/argv"
env -0 >"$work/env"
printf '%s' "$PWD" >"$work/cwd"
if [ -t 0 ]; then : >"$work/stdin"; else cat >"$work/stdin"; fi
: >"$work/stdout"
: >"$work/stderr"

p9() { echo "-fsdev local,id=$1,path=$2,security_model=passthrough,multidevs=remap$3 -device virtio-9p-pci,fsdev=$1,mount_tag=$1"; }
# shellcheck disable=SC2207 # word splitting of p9's output is meant
fsdevs=($(p9 hostroot / ,readonly=on) $(p9 handover "$work" ""))
IFS=: read -r -a rw_dirs <<<"${FULLKERNEL_RW:-}"
n=0
for d in "${rw_dirs[@]}"; do
	[ -n "$d" ] || continue
	mkdir -p "$d" && d=$(cd "$d" && pwd -P) || die "FULLKERNEL_RW: cannot use $d"
	printf '%s' "$d" >"$work/rw$n"
	# shellcheck disable=SC2207
	fsdevs+=($(p9 "rw$n" "$d" ""))
	n=$((n + 1))
done

console=$work/console
qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot \
	-machine q35,accel=tcg -cpu max -smp "${FULLKERNEL_CPUS:-2}" -m "${FULLKERNEL_MEM:-2G}" \
	-kernel "$kernel" -initrd "$initrd" \
	-append "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init" \
	-serial "file:$console" -monitor none \
	"${fsdevs[@]}" </dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!

# Stream the command's output while the VM runs; each relay ends once QEMU
# has exited and it has read the rest.
tail -n +1 -f --pid="$qemu_pid" "$work/stdout" &
relay_pids+=($!)
tail -n +1 -f --pid="$qemu_pid" "$work/stderr" >&2 &
relay_pids+=($!)
if [ "${FULLKERNEL_VERBOSE:-0}" = 1 ]; then
	tail -n +1 -F --pid="$qemu_pid" "$console" >&2 2>/dev/null &
	relay_pids+=($!)
fi

wait "$qemu_pid"
qemu_rc=$?
qemu_pid=
wait "${relay_pids[@]}" 2>/dev/null
relay_pids=()
if [ -s "$work/rc" ]; then
	exit "$(cat "$work/rc")"
fi
echo "$me: the guest ended before the command did (QEMU exit $qemu_rc); its console:" >&2
tail -30 "$console" >&2 2>/dev/null
tail -5 "$work/qemu.log" >&2
exit 255
