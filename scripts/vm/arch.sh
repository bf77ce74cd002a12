#!/usr/bin/env bash
# scripts/vm/arch.sh ARCH FILES_DIR SCRIPT
#
# Boots Debian's kernel of ARCH (amd64, arm64, arm, ppc64le, s390x,
# riscv64, mips64le) under QEMU's software emulation, with an initramfs of that
# architecture's own: Debian's busybox-static, `nft` with its libraries,
# the kernel's networking modules (bridge, veth, ifb, netfilter, traffic
# control, and what they depend on), FILES_DIR's files in /opt/cni/bin,
# and SCRIPT, which PID 1 runs as root under busybox sh, in /opt/cni/bin.
# Nothing of the host's runs in the guest: a binary of the wrong
# architecture fails there as it would on a node.
#
# The modules load on demand, as on a node: the kernel asks
# /sbin/modprobe (busybox's, reading the modules.dep and modules.alias
# that depmod wrote here) when a plugin first needs a bridge or an nft
# expression. A module missing from the initramfs fails the plugin that
# needs it.
#
# Prints SCRIPT's output (stdout and stderr, through the console). Exit
# status: SCRIPT's; 255 when the guest died or timed out; 125 when this
# script failed (packages, QEMU).
#
# The packages come from Debian's archive for ARCH through a private apt
# (its own sources and lists under the cache): the machine's dpkg
# architectures and its apt state are not touched. Fetched once and kept,
# with the initramfs's common part, in the cache.
#
# Settings (environment):
#   ARCH_VM_CACHE=/var/cache/cni-rs-vm/arch  packages and initramfs parts
#   ARCH_VM_TIMEOUT=900   seconds before the guest counts as hung
#   ARCH_VM_MEM=1G, ARCH_VM_CPUS=2 (mips64le: 1)
#   ARCH_VM_VERBOSE=1     the whole console, kernel messages included
#   ARCH_VM_MODULES_DROP=NAME[,NAME]  leave these modules out (to show
#                         that the guest needs them)
#   DEBIAN_MIRROR=http://deb.debian.org/debian
# Not `set -e`: every step that must work is checked (`|| die`), and the
# guest's exit status is read, not fatal. pipefail: a pipe fails with any
# of its commands.
set -uo pipefail
me=arch-vm
here=$(cd "$(dirname "$0")" && pwd)
cache=${ARCH_VM_CACHE:-/var/cache/cni-rs-vm/arch}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
die() {
	echo "$me: $*" >&2
	exit 125
}

[ $# -eq 3 ] || {
	echo "usage: $0 ARCH FILES_DIR SCRIPT" >&2
	exit 2
}
arch=$1 files=$2 script=$3
[ -d "$files" ] || die "$files is not a directory"
[ -f "$script" ] || die "$script is missing"
[ "$(id -u)" = 0 ] || die "needs root (apt, the cache)"

# ARCH: Debian's name, the kernel flavour, QEMU's binary and package, its
# machine, and the console. The guest's packages are bookworm's (Debian
# 12), but riscv64's: Debian 12 has no riscv64 kernel, trixie (Debian 13)
# is the first release with one. mips64le's Malta board has one CPU.
suite=bookworm cpus=${ARCH_VM_CPUS:-2}
case $arch in
amd64) deb=amd64 flavour=amd64 qemu=qemu-system-x86_64 qemu_pkg=qemu-system-x86
	machine=(-M q35 -cpu max) console=ttyS0 ;;
arm64) deb=arm64 flavour=arm64 qemu=qemu-system-aarch64 qemu_pkg=qemu-system-arm
	machine=(-M virt -cpu cortex-a57) console=ttyAMA0 ;;
arm) deb=armhf flavour=armmp qemu=qemu-system-arm qemu_pkg=qemu-system-arm
	machine=(-M virt,highmem=off -cpu cortex-a15) console=ttyAMA0 ;;
ppc64le) deb=ppc64el flavour=powerpc64le qemu=qemu-system-ppc64 qemu_pkg=qemu-system-ppc
	machine=(-M pseries -cpu power9) console=hvc0 ;;
s390x) deb=s390x flavour=s390x qemu=qemu-system-s390x qemu_pkg=qemu-system-misc
	machine=(-M s390-ccw-virtio -cpu max) console=ttysclp0 ;;
riscv64) deb=riscv64 flavour=riscv64 qemu=qemu-system-riscv64 qemu_pkg=qemu-system-misc
	machine=(-M virt -bios default) console=ttyS0 suite=trixie ;;
mips64le) deb=mips64el flavour=5kc-malta qemu=qemu-system-mips64el qemu_pkg=qemu-system-mips
	machine=(-M malta -cpu 5KEc) console=ttyS0 cpus=1 ;;
*) die "unknown architecture $arch (amd64, arm64, arm, ppc64le, s390x, riscv64, mips64le)" ;;
esac

. "$here/../deps.sh"
missing=()
command -v "$qemu" >/dev/null || missing+=("$qemu_pkg")
command -v cpio >/dev/null || missing+=(cpio)
command -v depmod >/dev/null || missing+=(kmod)
command -v xz >/dev/null || missing+=(xz-utils)
command -v zstd >/dev/null || missing+=(zstd)
[ ${#missing[@]} -eq 0 ] || apt_install --no-install-recommends "${missing[@]}" ||
	die "apt-get install ${missing[*]} failed"

mkdir -p "$cache/$deb" || die "cannot create $cache/$deb"
exec 9>"$cache/$deb/.lock"
flock 9 || die "cannot lock $cache/$deb/.lock"

# The private apt of ARCH: its suite's main, signed by Debian's key.
apt_dir=$cache/$deb/apt
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::status=/dev/null
	-o "APT::Architecture=$deb" -o "APT::Architectures::=$deb" -o Debug::NoLocking=1
	-o APT::Sandbox::User=root)
guest_apt() { # apt-get|apt-cache ARG...
	local tool=$1
	shift
	"$tool" "${apt_opts[@]}" "$@"
}

# The common part of the initramfs, built once per package set:
# busybox, nft and its libraries, the kernel's modules of the chain.
base_initramfs() {
	local kpkg kver pkgs root stage key img m
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$cache/$deb/debs"
	echo "deb [arch=$deb signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
		>"$apt_dir/sources.list"
	if [ ! -s "$cache/$deb/packages" ]; then
		guest_apt apt-get update -qq >&2 || die "apt-get update for $deb failed"
		kpkg=$(guest_apt apt-cache depends "linux-image-$flavour" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
		[ -n "$kpkg" ] || die "no kernel package behind linux-image-$flavour"
		# nft's libraries, by their Depends (pre-depends and recommends
		# are not needed to run it).
		pkgs=$(guest_apt apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances --no-pre-depends nftables | grep -v '^[ <]' | sort -u) ||
			die "apt-cache depends nftables for $deb failed"
		printf '%s\n' busybox-static "$kpkg" $pkgs >"$cache/$deb/packages.tmp"
		(cd "$cache/$deb/debs" && rm -f ./*.deb &&
			guest_apt apt-get download -qq $(cat "$cache/$deb/packages.tmp")) >&2 ||
			die "downloading the $deb packages failed"
		mv "$cache/$deb/packages.tmp" "$cache/$deb/packages"
	fi
	key=$( (cat "$cache/$deb/packages"; ls "$cache/$deb/debs"; echo "${ARCH_VM_MODULES_DROP:-}"; sed -n '/^base_initramfs()/,/^}/p' "$0") | sha256sum | cut -c1-16)
	img=$cache/$deb/base-$key.cpio.gz
	if [ ! -s "$img" ]; then
		rm -f "$cache/$deb"/base-*.cpio.gz "$cache/$deb"/kernel-*
		root=$(mktemp -d) stage=$(mktemp -d)
		for m in "$cache/$deb"/debs/*.deb; do dpkg-deb -x "$m" "$root" || die "cannot unpack $m"; done
		# A merged-/usr release (trixie) ships /bin, /sbin and /lib under
		# /usr only, but its binaries name /lib's loader: the links a
		# system's base-files make.
		for m in bin sbin lib; do
			[ -e "$root/$m" ] || [ ! -d "$root/usr/$m" ] || ln -s "usr/$m" "$root/$m" || die "cannot link /$m"
		done
		kver=$(ls "$root/lib/modules" | head -1)
		[ -n "$kver" ] || die "no modules in the $deb kernel package"
		if [ -f "$root/boot/vmlinux-$kver" ]; then
			cp "$root/boot/vmlinux-$kver" "$cache/$deb/kernel-$key"
		else
			cp "$root/boot/vmlinuz-$kver" "$cache/$deb/kernel-$key"
		fi || die "cannot copy the $kver kernel"
		# The modules: what the chain's kernel features are built as,
		# with everything they depend on (soft dependencies included:
		# kmod's modprobe resolves them here). A place a kernel does not
		# have (veth built in, say) is left out; every copy is checked.
		mkdir -p "$stage/lib/modules/$kver" || die "mkdir $stage"
		cp "$root/lib/modules/$kver"/modules.builtin* "$root/lib/modules/$kver/modules.order" \
			"$stage/lib/modules/$kver/" || die "cannot copy the $kver module lists"
		depmod -b "$root" "$kver" || die "depmod for $kver failed"
		local places=() place
		for place in kernel/net/bridge kernel/net/netfilter kernel/net/ipv4/netfilter \
			kernel/net/ipv6/netfilter kernel/net/sched kernel/drivers/net/veth.ko kernel/drivers/net/ifb.ko; do
			for place in "$place" "$place.xz" "$place.zst"; do
				[ -e "$root/lib/modules/$kver/$place" ] && places+=("$place") && break
			done
		done
		[ ${#places[@]} -gt 0 ] || die "none of the chain's modules is in the $kver kernel"
		# Modules are plain (.ko, bookworm) or compressed (.ko.xz, trixie);
		# busybox's modprobe is given them plain.
		(cd "$root/lib/modules/$kver" && find "${places[@]}" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst') |
			sed 's|.*/||; s|\.ko\(\.[a-z]*\)\{0,1\}$||' >"$stage/.wanted" || die "cannot list the $kver modules"
		[ -s "$stage/.wanted" ] || die "no module of the chain in the $kver kernel's places (${places[*]})"
		while read -r m; do
			case ",${ARCH_VM_MODULES_DROP:-}," in *",$m,"*) continue ;; esac
			modprobe -d "$root" -S "$kver" --show-depends "$m" || die "modprobe --show-depends $m failed"
		done <"$stage/.wanted" | awk '$1 == "insmod" { print $2 }' | sort -u >"$stage/.files" ||
			die "cannot resolve the $kver modules' dependencies"
		while read -r m; do
			local plain=${m%.xz}
			plain=${plain%.zst}
			case ",${ARCH_VM_MODULES_DROP:-}," in *",$(basename "$plain" .ko),"*) continue ;; esac
			mkdir -p "$stage/$(dirname "${m#"$root"}")" || die "mkdir for module $m"
			case $m in
			*.xz) xz -dc "$m" >"$stage/${plain#"$root"}" ;;
			*.zst) zstd -qdc "$m" >"$stage/${plain#"$root"}" ;;
			*) cp "$m" "$stage/${m#"$root"}" ;;
			esac || die "cannot copy module $m"
		done <"$stage/.files"
		rm -f "$stage/.wanted" "$stage/.files"
		depmod -b "$stage" "$kver" || die "depmod of the guest's modules failed"
		mkdir -p "$stage/bin" "$stage/sbin" "$stage/usr/sbin" "$stage/usr/lib" "$stage/lib" || die "mkdir $stage"
		cp "$root/bin/busybox" "$stage/bin/busybox" || die "cannot copy busybox"
		cp "$root/usr/sbin/nft" "$stage/usr/sbin/nft" || die "cannot copy nft"
		# The libraries and the dynamic loader, where nft looks for them.
		for m in "$root"/lib/*-linux-gnu* "$root"/lib/ld*.so* "$root"/lib64 "$root"/usr/lib/*-linux-gnu*; do
			[ -e "$m" ] || continue
			cp -a "$m" "$stage/$(dirname "${m#"$root"}")/" || die "cannot copy $m"
		done
		rm -rf "$stage"/usr/lib/*/gconv "$stage"/usr/lib/*/audit
		(cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$img.tmp" ||
			die "cannot build the initramfs"
		mv -f "$img.tmp" "$img"
		rm -rf "$root" "$stage"
	fi
	echo "$img"
}

base=$(base_initramfs) || exit 125
key=${base##*/base-}
kernel=$cache/$deb/kernel-${key%.cpio.gz}
exec 9>&-

work=$(mktemp -d /tmp/arch-vm.XXXXXX) || die "mktemp failed"
qemu_pid=
cleanup() {
	[ -n "$qemu_pid" ] && kill -KILL "$qemu_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# This run's part: PID 1, the script, FILES_DIR as /opt/cni/bin.
run=$work/run
mkdir -p "$run/opt/cni/bin" "$run/etc/cni/net.d" || die "mkdir $run"
cp -a "$files"/. "$run/opt/cni/bin/" || die "cannot copy $files"
cp "$script" "$run/test.sh" || die "cannot copy $script"
cat >"$run/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /usr/bin /usr/sbin /sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run /tmp /var/run /var/lib
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount --make-rprivate /
ln -s /run/netns /var/run/netns 2>/dev/null
echo /sbin/modprobe >/proc/sys/kernel/modprobe
ip link set lo up
echo "==arch-vm: up $(uname -m) $(uname -r), booted in $(cut -d' ' -f1 /proc/uptime) s"
cd /opt/cni/bin
sh /test.sh 2>&1
echo "==arch-vm: rc=$?"
poweroff -f
EOF
chmod 0755 "$run/init" "$run/test.sh"
(cd "$run" && find . -print0 | cpio --null -o -H newc --quiet -R 0:0 | gzip -1) >"$work/run.cpio.gz" ||
	die "cannot pack the run's initramfs"
# The kernel unpacks concatenated archives in order.
cat "$base" "$work/run.cpio.gz" >"$work/initrd" || die "cannot write the initrd"

console_log=$work/console
start=$(date +%s.%N)
# -nic none: no network device (Malta's built-in one wants a boot ROM);
# the guest's network is the namespaces its test makes.
timeout "${ARCH_VM_TIMEOUT:-900}" "$qemu" -nographic -no-reboot -no-user-config -nic none \
	"${machine[@]}" -smp "$cpus" -m "${ARCH_VM_MEM:-1G}" \
	-kernel "$kernel" -initrd "$work/initrd" \
	-append "console=$console quiet loglevel=3 panic=-1 rdinit=/init" \
	-serial "file:$console_log" -monitor none </dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!
wait "$qemu_pid"
qemu_rc=$?
qemu_pid=
tr -d '\r' <"$console_log" | sed 's/.==arch-vm:/\n==arch-vm:/g' >"$console_log.txt"
if [ "${ARCH_VM_VERBOSE:-0}" = 1 ]; then
	cat "$console_log.txt"
else
	sed -n '/^==arch-vm: up/,/^==arch-vm: rc=/p' "$console_log.txt"
fi
rc=$(sed -n 's/^==arch-vm: rc=\([0-9]*\)$/\1/p' "$console_log.txt" | tail -1)
up=$(grep -n '^==arch-vm: up' "$console_log.txt" | head -1)
awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "==arch-vm: QEMU ran %.1f s\n", e - s }'
if [ -n "$rc" ]; then
	exit "$rc"
fi
[ "$qemu_rc" = 124 ] && echo "$me: the guest did not finish in ${ARCH_VM_TIMEOUT:-900} s" >&2
[ -z "$up" ] && echo "$me: the guest never came up (QEMU exit $qemu_rc); its console:" >&2
tail -30 "$console_log.txt" >&2
tail -5 "$work/qemu.log" >&2
exit 255
