#!/usr/bin/env bash
# Builds the Debian package of the suite from a directory of built binaries
# (scripts/release.sh calls it with its release binaries):
#
#   scripts/package-deb.sh BINS_DIR OUT_DIR [CNI_RS]
#
# writes OUT_DIR/cni-rs_<version>_<arch>.deb and prints its path. Every
# executable file of BINS_DIR goes to /usr/lib/cni (where Debian's
# containernetworking-plugins puts its plugins), cnitool is linked from
# /usr/bin and cni-rs-install from /usr/sbin, and the dhcp daemon's systemd
# units (plugins/dhcp/systemd/cni-dhcp.{service,socket}) go to
# /lib/systemd/system, disabled. CNI_RS, the multicall binary, is the node
# command: /usr/sbin/cni-rs, with the gc service and timer
# (operator/deploy) in /lib/systemd/system, disabled, and the DaemonSet
# (deploy/cni-rs.yaml) in /usr/share/doc/cni-rs/examples. See docs/install.md and
# docs/operating.md.
#
# The package Conflicts with, Replaces and Provides containernetworking-plugins
# (and container-network-stack, which podman's dependencies name): dpkg then
# removes the Go package as it installs this one, files are never shared
# between the two, and whatever depended on the Go package stays installed.
#
# /usr/share/doc/cni-rs holds the copyright file in Debian's machine-readable
# form (DEP-5) and THIRD-PARTY-NOTICES, both of exactly the crates the
# package's binaries link (scripts/bom.py, from what each binary embeds:
# they are built with cargo auditable), and the changelog; each program in
# a bin dir has its manual page (docs/man, rendered from its --help by
# crate manpages). docs/install.md gives the lintian overrides, and why.
#
# Same inputs, same bytes: file times are SOURCE_DATE_EPOCH (default: the
# last commit's time), owners root, dpkg-deb sorts the entries.
# Environment: DEB_MAINTAINER, the Maintainer field ("Name <address>"), who
# builds the package: required, else DEBFULLNAME and DEBEMAIL (as dch reads
# them); ABOUT_JSON, cargo-about's JSON of the workspace (default: made
# here, `cargo about generate`); SOURCE_DATE_EPOCH; DEB_COMPRESS (xz, the
# default, or gzip, none); CNI_RS_VERSION (default: the workspace's
# version); DEB_ARCH, the binaries' Debian architecture (default: this
# machine's).
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/suite.sh"

if [ $# -ne 2 ] && [ $# -ne 3 ]; then
  echo "usage: $0 BINS_DIR OUT_DIR [CNI_RS]" >&2
  exit 2
fi
bins_dir=$1
out_dir=$2
node_command=${3:-}
version=${CNI_RS_VERSION:-$(suite_version)}
arch=${DEB_ARCH:-$(dpkg --print-architecture)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
compress=${DEB_COMPRESS:-xz}
maintainer=${DEB_MAINTAINER:-}
if [ -z "$maintainer" ] && [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then
  maintainer="$DEBFULLNAME <$DEBEMAIL>"
fi
if ! [[ $maintainer =~ ^[^\<\>]+\ \<[^@\<\>\ ]+@[^@\<\>\ ]+\>$ ]]; then
  echo "error: set DEB_MAINTAINER to who builds this package, \"Name <address>\" (got '$maintainer')" >&2
  exit 2
fi
units_src=$repo/plugins/dhcp/systemd
units=(cni-dhcp.service cni-dhcp.socket)

names=()
for f in "$bins_dir"/*; do
  if [ -f "$f" ] && [ -x "$f" ]; then
    names+=("$(basename "$f")")
  fi
done
if [ ${#names[@]} -eq 0 ]; then
  echo "error: no binaries in $bins_dir" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d -m 0755 "$root/DEBIAN" "$root/usr/lib/cni" "$root/usr/bin" "$root/usr/sbin" \
  "$root/usr/share/doc/cni-rs"
for n in "${names[@]}"; do
  install -m 0755 "$bins_dir/$n" "$root/usr/lib/cni/$n"
done
has() {
  local n
  for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done
  return 1
}
if has cnitool; then ln -s ../lib/cni/cnitool "$root/usr/bin/cnitool"; fi
if has cni-rs-install; then ln -s ../lib/cni/cni-rs-install "$root/usr/sbin/cni-rs-install"; fi
rmdir --ignore-fail-on-non-empty "$root/usr/bin" "$root/usr/sbin"

# The dhcp daemon's units: shipped when they are in the tree, required with
# the dhcp plugin. /lib, not /usr/lib: the path Debian's package ships them
# at, so that dpkg sees one file taken over, not two aliases of it.
shipped_units=
if [ -f "$units_src/${units[0]}" ] || [ -f "$units_src/${units[1]}" ] || has dhcp; then
  install -d -m 0755 "$root/lib/systemd/system"
  for u in "${units[@]}"; do
    if [ ! -f "$units_src/$u" ]; then
      echo "error: $units_src/$u is missing (the dhcp plugin's systemd units ship with it)" >&2
      exit 1
    fi
    install -m 0644 "$units_src/$u" "$root/lib/systemd/system/$u"
  done
  shipped_units="${units[*]}"
fi

if [ -n "$node_command" ]; then
  install -d -m 0755 "$root/usr/sbin" "$root/lib/systemd/system" "$root/usr/share/doc/cni-rs/examples"
  install -m 0755 "$node_command" "$root/usr/sbin/cni-rs"
  deploy=$repo/operator/deploy
  sed "s|@CNI_RS@|/usr/sbin/cni-rs|" "$deploy/cni-rs-gc.service.in" >"$root/lib/systemd/system/cni-rs-gc.service"
  chmod 0644 "$root/lib/systemd/system/cni-rs-gc.service"
  install -m 0644 "$deploy/cni-rs-gc.timer" "$root/lib/systemd/system/"
  install -m 0644 "$repo/deploy/cni-rs.yaml" "$root/usr/share/doc/cni-rs/examples/"
  shipped_units="${shipped_units:+$shipped_units }cni-rs-gc.service cni-rs-gc.timer"
fi

# Licenses and notices of exactly what the binaries link.
binaries=()
for n in "${names[@]}"; do binaries+=("$root/usr/lib/cni/$n"); done
[ -z "$node_command" ] || binaries+=("$root/usr/sbin/cni-rs")
about=${ABOUT_JSON:-}
if [ -z "$about" ]; then
  about=$stage/about.json
  # Every platform's crates first (cargo about reads them all), then offline.
  (cd "$repo" && cargo fetch --locked >/dev/null &&
    cargo about generate --offline --locked --format json --workspace -o "$about")
fi
python3 "$repo/scripts/bom.py" copyright --about "$about" "${binaries[@]}" >"$root/usr/share/doc/cni-rs/copyright"
python3 "$repo/scripts/bom.py" notices --about "$about" "${binaries[@]}" |
  gzip -9 -n >"$root/usr/share/doc/cni-rs/THIRD-PARTY-NOTICES.gz"
# A native package's changelog (Debian policy 12.7), dated the release.
# (The name is escaped for sed's replacement: `&`, `|` and `\`.)
maintainer_sed=$(printf '%s' "$maintainer" | sed 's/[&|\\]/\\&/g')
sed -e "s|@VERSION@|$version|" -e "s|@MAINTAINER@|$maintainer_sed|" \
  -e "s|@DATE@|$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")|" "$repo/scripts/deb/changelog.in" |
  gzip -9 -n >"$root/usr/share/doc/cni-rs/changelog.gz"
# The manual page of each program in a bin dir.
for page in "$repo"/docs/man/*.[18]; do
  name=$(basename "$page")
  [ -e "$root/usr/bin/${name%.*}" ] || [ -e "$root/usr/sbin/${name%.*}" ] || continue
  install -d -m 0755 "$root/usr/share/man/man${name##*.}"
  gzip -9 -n <"$page" >"$root/usr/share/man/man${name##*.}/$name.gz"
done
for dir in usr/bin usr/sbin; do
  for program in "$root/$dir"/*; do
    [ -e "$program" ] || continue
    p=$(basename "$program")
    ls "$root"/usr/share/man/man[18]/"$p".[18].gz >/dev/null 2>&1 ||
      { echo "error: /$dir/$p has no manual page in docs/man (crate manpages)" >&2; exit 1; }
  done
done
# lintian's reading of static binaries, overridden with the reason: the
# tag of the kind the target builds (static-pie: ET_DYN; plain static on
# a target without static-pie, s390x, riscv64 and mips64le: ET_EXEC), so
# that no override goes unused.
tags=()
for f in "${binaries[@]}"; do
  case $(readelf -hW "$f" | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p') in
  DYN) tags+=(shared-library-lacks-prerequisites) ;;
  EXEC) tags+=(statically-linked-binary) ;;
  esac
done
install -d -m 0755 "$root/usr/share/lintian/overrides"
grep -v '^#' "$repo/scripts/deb/lintian-overrides" |
  grep -F -e "$(printf '%s\n' "${tags[@]}" | sort -u)" >"$root/usr/share/lintian/overrides/cni-rs"
find "$root/usr/share" -type f -exec chmod 0644 {} +
for script in postinst prerm postrm; do
  sed -e "s|@UNITS@|$shipped_units|" -e "s|@NAMES@|${names[*]}|" \
    "$repo/scripts/deb/$script" >"$root/DEBIAN/$script"
  chmod 0755 "$root/DEBIAN/$script"
done

# Static binaries (docs/dependencies-and-build.md): no Depends on libc6,
# and a package that will not ship a dynamic one.
for f in "$root"/usr/lib/cni/* ${node_command:+"$root/usr/sbin/cni-rs"}; do
  # readelf reads every architecture's ELF (objdump only this machine's).
  if ! readelf -h "$f" >/dev/null 2>&1 ||
    readelf -lW "$f" | grep -q 'program interpreter' || readelf -dW "$f" | grep -q '(NEEDED)'; then
    echo "error: $f is dynamically linked: the package ships static binaries" >&2
    exit 1
  fi
done
installed_size=$(du -s -k --apparent-size "$root" --exclude=DEBIAN | cut -f1)

cat >"$root/DEBIAN/control" <<EOF
Package: cni-rs
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Recommends: iptables
Conflicts: containernetworking-plugins
Replaces: containernetworking-plugins
Provides: containernetworking-plugins, container-network-stack (= 1)
Section: net
Priority: optional
Description: CNI reference plugins in Rust, a drop-in for containernetworking-plugins
 The CNI plugins (bridge, host-local, portmap, bandwidth, firewall, tuning,
 macvlan, flannel, ...) with the Go reference plugins' config keys, results
 and files on disk, in /usr/lib/cni as Debian's containernetworking-plugins,
 which this package replaces. Also cnitool, and cni-rs-install, which links
 or copies the plugins into /opt/cni/bin for runtimes that look there:
   cni-rs-install --link /opt/cni/bin
 The dhcp daemon's systemd units are installed disabled. cni-rs is the node
 command: cni-rs inspect (which pod holds what), cni-rs gc (the CNI GC no
 runtime calls; cni-rs-gc.timer runs it every 10 minutes once enabled) and
 cni-rs doctor.
EOF

(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out_dir"
deb=$out_dir/cni-rs_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >/dev/null
echo "$deb"
