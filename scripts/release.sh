#!/usr/bin/env bash
# Builds the release binaries and writes the release artifacts:
#
#   dist/cni-rs-linux-<arch>-v<version>.tgz          every plugin, cnitool and
#                                                    cni-rs-install, flat, as
#                                                    upstream's cni-plugins tarball
#   dist/cni-rs-linux-<arch>-v<version>.tgz.sha256   `sha256sum` line of it
#   dist/cni-rs-linux-<arch>-v<version>.tgz.sha512   `sha512sum` line of it
#   dist/cni-rs-multicall-linux-<arch>-v<version>.tgz  the multicall form: the
#                                                    binary cni-rs and a link per
#                                                    plugin to it (bridge -> cni-rs),
#                                                    and deploy/: the gc service and
#                                                    timer, the DaemonSet (cni-rs.yaml)
#   dist/cni-rs-multicall-...tgz.sha256, .sha512     as above
#   dist/cni-rs-image-linux-<arch>-v<version>.tar    the container image, FROM scratch:
#                                                    the multicall binary and its links,
#                                                    an OCI image archive (scripts/image.sh)
#   dist/cni-rs-image-...tar.sha256, .sha512         as above
#   dist/cni-rs_<version>_<debarch>.deb              the Debian package (scripts/package-deb.sh),
#                                                    separate binaries, and cni-rs
#                                                    as the node command
#   dist/SHA256SUMS                                  `sha256sum` of the tarballs, the image
#                                                    and the package
#
# Usage: scripts/release.sh [--out DIR] [--only NAME,NAME]
#   --out DIR    write there instead of dist/
#   --only ...   build and ship only these binaries, and a multicall binary of
#                only the plugins among them (the reproducibility test uses it
#                to keep CI fast); default: the whole suite
#
# The binaries are the workspace's bin targets (scripts/suite.sh), the
# version is the workspace's. Reproducible: the same commit gives the same
# bytes, wherever the source and the target dir are. Paths are remapped
# (--remap-path-prefix for the source, CARGO_HOME and the target dir), rustc
# and the linker write no time stamps, the tarball's entries are sorted with
# owner root and mtime SOURCE_DATE_EPOCH (default: the last commit's time),
# gzip -n stores no name or time. RUSTFLAGS from the environment are not
# used: they would change the bytes.
#
# Environment: SOURCE_DATE_EPOCH; CARGO_TARGET_DIR (default target/dist, apart
# from target/release so the remapping flags do not rebuild a developer's
# release tree).
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/suite.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
out=$repo/dist
only=
while [ $# -gt 0 ]; do
  case $1 in
  --out) out=${2:?--out needs a directory}; shift 2 ;;
  --out=*) out=${1#--out=}; shift ;;
  --only) only=${2:?--only needs names}; shift 2 ;;
  --only=*) only=${1#--only=}; shift ;;
  -h | --help) usage; exit 0 ;;
  *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(suite_version)
mapfile -t bins < <(suite_bins)
if [ -n "$only" ]; then
  IFS=, read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    if ! printf '%s\n' "${bins[@]}" | grep -qx -- "$w"; then
      echo "error: --only: $w is not a binary of the suite (${bins[*]})" >&2
      exit 2
    fi
  done
  bins=("${wanted[@]}")
fi

host=$(rustc -vV | sed -n 's/^host: //p')
case $host in
x86_64-*-linux-gnu) arch=amd64 ;;
aarch64-*-linux-gnu) arch=arm64 ;;
*) echo "error: no release arch name for host $host" >&2; exit 1 ;;
esac

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null) || {
    echo "error: not a git checkout: set SOURCE_DATE_EPOCH (the commit's time, seconds)" >&2
    exit 1
  }
  if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "warning: the work tree has uncommitted changes: this is not the commit's release" >&2
  fi
fi
export SOURCE_DATE_EPOCH

target=${CARGO_TARGET_DIR:-$repo/target/dist}
mkdir -p "$target"
target=$(cd "$target" && pwd)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
# The last matching prefix wins, so the target dir (inside the source by
# default) comes last.
sep=$'\x1f'
# These flags replace .cargo/config.toml's, so they name crt-static again:
# static binaries (glibc's libc.a), which need no loader and no library of
# the node's (docs/dependencies-and-build.md). With --target they reach only
# what ships, never the build scripts and proc-macros, which run here.
export CARGO_ENCODED_RUSTFLAGS="-Ctarget-feature=+crt-static$sep--remap-path-prefix=$repo=/cni-rs$sep--remap-path-prefix=$cargo_home=/cargo$sep--remap-path-prefix=$target=/target"
unset RUSTFLAGS
bin_args=()
for b in "${bins[@]}"; do bin_args+=(--bin "$b"); done
echo "building ${bins[*]} (release, v$version, $arch)" >&2
start=$(date +%s)
# Not `tests` (nor what only it uses): it turns on libcni's fault-points,
# the crash campaign's hook, which must not ship.
(cd "$repo" && cargo build --release --locked --workspace --exclude tests --exclude cri-client \
  --exclude bench --target "$host" --target-dir "$target" "${bin_args[@]}")
echo "built in $(($(date +%s) - start)) s" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
for b in "${bins[@]}"; do
  install -m 0755 "$target/$host/release/$b" "$stage/$b"
done

# The multicall binary: every plugin, or with --only the plugins named
# (its crate has a feature per plugin).
read -r multicall_pkg multicall_bin < <(suite_multicall)
features=()
if [ -n "$only" ]; then
  plugins=$(cd "$repo" && cargo metadata --no-deps --format-version 1 --locked |
    python3 -c 'import json,sys; m=json.load(sys.stdin); print("\n".join(next(p for p in m["packages"] if p["name"]==sys.argv[1])["features"]["default"]))' "$multicall_pkg")
  chosen=$(printf '%s\n' "${bins[@]}" | grep -Fxf <(printf '%s\n' "$plugins") | paste -sd, -)
  features=(--no-default-features --features "$chosen")
fi
echo "building $multicall_bin (release, ${chosen:-every plugin})" >&2
(cd "$repo" && cargo build --release --locked --target "$host" --target-dir "$target" -p "$multicall_pkg" "${features[@]}")
multicall_stage=$(mktemp -d)
trap 'rm -rf "$stage" "$multicall_stage"' EXIT
chmod 0755 "$multicall_stage"
install -m 0755 "$target/$host/release/$multicall_bin" "$multicall_stage/$multicall_bin"
for p in $("$multicall_stage/$multicall_bin" --list); do
  ln -s "$multicall_bin" "$multicall_stage/$p"
done
# The node command's units and manifest, beside the binary they run (the
# installer takes only executables and their links: these stay behind).
deploy=$repo/operator/deploy
install -d -m 0755 "$multicall_stage/deploy"
sed "s|@CNI_RS@|/opt/cni/bin/cni-rs|" "$deploy/cni-rs-gc.service.in" >"$multicall_stage/deploy/cni-rs-gc.service"
install -m 0644 "$deploy/cni-rs-gc.timer" "$repo/deploy/cni-rs.yaml" "$multicall_stage/deploy/"
chmod 0644 "$multicall_stage/deploy/cni-rs-gc.service"

# Reproducible tarballs: sorted, root-owned, dated the commit, gzip -n.
checksums() { # FILE
  (cd "$out" && sha256sum "$1" >"$1.sha256" && sha512sum "$1" >"$1.sha512")
}
pack() { # DIR TGZ
  rm -f "$out/$2" "$out/$2.sha256" "$out/$2.sha512"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$1" -cf - . | gzip -9 -n >"$out/$2"
  checksums "$2"
}
tgz=cni-rs-linux-$arch-v$version.tgz
multicall_tgz=cni-rs-multicall-linux-$arch-v$version.tgz
image=cni-rs-image-linux-$arch-v$version.tar
rm -f "$out/SHA256SUMS" "$out"/cni-rs_"$version"_*.deb "$out/$image"*
pack "$stage" "$tgz"
pack "$multicall_stage" "$multicall_tgz"
digest=$("$repo/scripts/image.sh" "$multicall_stage" "$out/$image")
checksums "$image"
echo "image $image: $digest" >&2

deb=$("$repo/scripts/package-deb.sh" "$stage" "$out" "$multicall_stage/$multicall_bin")
deb_name=$(basename "$deb")
(cd "$out" && sha256sum "$tgz" "$multicall_tgz" "$image" "$deb_name" >SHA256SUMS)

echo "wrote $out:" >&2
(cd "$out" && ls -l "$tgz"* "$multicall_tgz"* "$image"* "$deb_name" SHA256SUMS) >&2
