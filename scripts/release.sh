#!/usr/bin/env bash
# Builds the release binaries of every architecture and writes the release
# artifacts (ARCH: amd64, arm64, arm, ppc64le, s390x; DEBARCH: Debian's name
# of it, armhf and ppc64el for arm and ppc64le):
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
#   dist/cni-rs_<version>_<debarch>.deb              the Debian package (scripts/package-deb.sh),
#                                                    separate binaries, and cni-rs
#                                                    as the node command
#   dist/cni-rs-image-v<version>.tar                 the container image, FROM scratch:
#                                                    one image index with a manifest
#                                                    per architecture, each the
#                                                    multicall binary and its links,
#                                                    an OCI image archive (scripts/image.sh)
#   dist/cni-rs-image-...tar.sha256, .sha512         as above
#   dist/SHA256SUMS                                  `sha256sum` of the tarballs, the
#                                                    packages and the image
#
# Then each foreign architecture's multicall form and cnitool run the chain
# test on Debian's kernel of that architecture under QEMU
# (scripts/arch-test.sh); a failure fails the release.
#
# Usage: scripts/release.sh [--out DIR] [--arch ARCH,ARCH] [--only NAME,NAME]
#                           [--no-kernel-test]
#   --out DIR    write there instead of dist/
#   --arch ...   these architectures only (default: all five)
#   --only ...   build and ship only these binaries, and a multicall binary of
#                only the plugins among them (the reproducibility test uses it
#                to keep CI fast); `cni-rs` among them is the multicall binary
#                with every plugin (what the architecture test boots); default:
#                the whole suite
#   --no-kernel-test  leave the foreign architectures' kernel test out
#
# The binaries are the workspace's bin targets (scripts/suite.sh), the
# version is the workspace's. The host's architecture builds with the
# machine's Rust, a foreign one with Debian's cross toolchain, installed when
# missing (scripts/arch.sh). Every binary must be static and of its
# architecture's machine, and the multicall binary under 6 MB.
# Reproducible: the same commit gives the same bytes, wherever the source
# and the target dir are. Paths are remapped
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
. "$repo/scripts/arch.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
out=$repo/dist
only=
arches=$(arch_names | tr ' ' ,)
kernel_test=1
while [ $# -gt 0 ]; do
  case $1 in
  --out) out=${2:?--out needs a directory}; shift 2 ;;
  --out=*) out=${1#--out=}; shift ;;
  --only) only=${2:?--only needs names}; shift 2 ;;
  --only=*) only=${1#--only=}; shift ;;
  --arch) arches=${2:?--arch needs names}; shift 2 ;;
  --arch=*) arches=${1#--arch=}; shift ;;
  --no-kernel-test) kernel_test=; shift ;;
  -h | --help) usage; exit 0 ;;
  *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(suite_version)
IFS=, read -r -a arches <<<"$arches"
for a in "${arches[@]}"; do arch_target "$a" >/dev/null || exit 2; done
# Each list is read into a variable first: `mapfile < <(...)` would hide
# a failure of the command.
listed=$(suite_bins)
mapfile -t bins <<<"$listed"
all_bins=("${bins[@]}")
listed=$(suite_multicall)
read -r multicall_pkg multicall_bin <<<"$listed"
# The multicall binary's plugins: its crate's default features, less the
# node commands (its `--list`, which a foreign binary cannot answer here).
listed=$(cd "$repo" && cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; m=json.load(sys.stdin); print("\n".join(f for f in next(p for p in m["packages"] if p["name"]==sys.argv[1])["features"]["default"] if f != "node-commands"))' "$multicall_pkg")
mapfile -t every_plugin <<<"$listed"
features=()
if [ -n "$only" ]; then
  IFS=, read -r -a wanted <<<"$only"
  bins=()
  multicall_plugins=()
  for w in "${wanted[@]}"; do
    if [ "$w" = "$multicall_bin" ]; then
      multicall_plugins=("${every_plugin[@]}")
      continue
    fi
    if ! printf '%s\n' "${all_bins[@]}" | grep -qx -- "$w"; then
      echo "error: --only: $w is not a binary of the suite (${all_bins[*]} $multicall_bin)" >&2
      exit 2
    fi
    bins+=("$w")
  done
  if ! printf '%s\n' "${wanted[@]}" | grep -qx -- "$multicall_bin"; then
    # No plugin among them (tools only) is no failure: grep's 1 is allowed.
    listed=$(printf '%s\n' "${bins[@]}" | grep -Fxf <(printf '%s\n' "${every_plugin[@]}")) || [ $? -eq 1 ]
    multicall_plugins=()
    [ -z "$listed" ] || mapfile -t multicall_plugins <<<"$listed"
    features=(--no-default-features --features "$(printf '%s\n' "${multicall_plugins[@]}" | paste -sd, -)")
  fi
else
  multicall_plugins=("${every_plugin[@]}")
fi
for a in "${arches[@]}"; do ensure_cross_toolchain "$a" || exit 1; done

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
stages=$(mktemp -d)
trap 'rm -rf "$stages"' EXIT
chmod 0755 "$stages"

# A failed step stops the release, naming the architecture and the step.
# `set -e` alone does not: bash turns it off inside a function called
# under `||`, `&&` or `if`, so build_arch and what it calls check each
# step themselves, and nothing here calls them under one.
fail() { # ARCH WHAT
  echo "error: the release of $1 stops: $2" >&2
  exit 1
}

# Builds ARCH's binaries into $stages/ARCH/{bins,multicall}. The target
# dir may hold an earlier build's binaries: only a build that succeeded
# here is installed from it.
build_arch() {
  local arch=$1 triple start b
  triple=$(arch_target "$arch") || fail "$arch" "no Rust target for it"
  start=$(date +%s)
  if [ ${#bins[@]} -gt 0 ]; then
    echo "building ${bins[*]} (release, v$version, $arch)" >&2
    # Not `tests` (nor what only it uses): it turns on libcni's fault-points,
    # the crash campaign's hook, which must not ship.
    (cd "$repo" && arch_cargo "$arch" build --release --locked --workspace --exclude tests --exclude cri-client \
      --exclude bench --target "$triple" --target-dir "$target" "${bin_args[@]}") ||
      fail "$arch" "cargo build of ${bins[*]} failed"
  fi
  echo "building $multicall_bin (release, $arch, ${#multicall_plugins[@]} plugins)" >&2
  (cd "$repo" && arch_cargo "$arch" build --release --locked --target "$triple" --target-dir "$target" \
    -p "$multicall_pkg" "${features[@]}") || fail "$arch" "cargo build of $multicall_bin failed"
  echo "built $arch in $(($(date +%s) - start)) s" >&2

  install -d -m 0755 "$stages/$arch/bins" "$stages/$arch/multicall" || fail "$arch" "making $stages/$arch"
  for b in "${bins[@]}" "$multicall_bin"; do
    [ -f "$target/$triple/release/$b" ] || fail "$arch" "$b is missing from $target/$triple/release"
  done
  for b in "${bins[@]}"; do
    install -m 0755 "$target/$triple/release/$b" "$stages/$arch/bins/$b" || fail "$arch" "installing $b"
  done
  install -m 0755 "$target/$triple/release/$multicall_bin" "$stages/$arch/multicall/$multicall_bin" ||
    fail "$arch" "installing $multicall_bin"
  for b in "${multicall_plugins[@]}"; do
    ln -s "$multicall_bin" "$stages/$arch/multicall/$b" || fail "$arch" "linking $b to $multicall_bin"
  done
  # The node command's units and manifest, beside the binary they run (the
  # installer takes only executables and their links: these stay behind).
  local deploy=$repo/operator/deploy dir=$stages/$arch/multicall/deploy
  { install -d -m 0755 "$dir" &&
    sed "s|@CNI_RS@|/opt/cni/bin/cni-rs|" "$deploy/cni-rs-gc.service.in" >"$dir/cni-rs-gc.service" &&
    install -m 0644 "$deploy/cni-rs-gc.timer" "$repo/deploy/cni-rs.yaml" "$dir/" &&
    chmod 0644 "$dir/cni-rs-gc.service"; } || fail "$arch" "installing the deploy files"

  # Static, of ARCH's machine, and small: what every node can start.
  local machine f size header
  machine=$(arch_elf_machine "$arch") || fail "$arch" "no ELF machine name for it"
  for f in "$stages/$arch"/bins/* "$stages/$arch/multicall/$multicall_bin"; do
    header=$(readelf -hW "$f") || fail "$arch" "$f is not an ELF file"
    if ! grep -q "Machine: *$machine\$" <<<"$header"; then
      fail "$arch" "$f is not a binary of $arch ($machine): $(grep Machine: <<<"$header")"
    fi
    if readelf -lW "$f" | grep -q 'program interpreter' || readelf -dW "$f" | grep -q '(NEEDED)'; then
      fail "$arch" "$f is dynamically linked: every release binary is static"
    fi
  done
  size=$(stat -c %s "$stages/$arch/multicall/$multicall_bin") || fail "$arch" "stat $multicall_bin"
  if [ "$size" -ge 6000000 ]; then
    fail "$arch" "the multicall binary is $size bytes, over the 6 MB bound"
  fi
}

# Reproducible tarballs: sorted, root-owned, dated the commit, gzip -n.
checksums() { # FILE
  (cd "$out" && sha256sum "$1" >"$1.sha256" && sha512sum "$1" >"$1.sha512")
}
pack() { # DIR TGZ
  rm -f "$out/$2" "$out/$2.sha256" "$out/$2.sha512"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$1" -cf - . | gzip -9 -n >"$out/$2"
}
rm -f "$out/SHA256SUMS"
sums=()
images=()
for arch in "${arches[@]}"; do
  tgz=cni-rs-linux-$arch-v$version.tgz
  multicall_tgz=cni-rs-multicall-linux-$arch-v$version.tgz
  # An earlier run's artifacts go first: a failed build leaves none.
  rm -f "$out/$tgz"* "$out/$multicall_tgz"* "$out/cni-rs_${version}_$(arch_debian "$arch").deb"
  build_arch "$arch"
  pack "$stages/$arch/bins" "$tgz" || fail "$arch" "packing $tgz"
  checksums "$tgz" || fail "$arch" "checksums of $tgz"
  pack "$stages/$arch/multicall" "$multicall_tgz" || fail "$arch" "packing $multicall_tgz"
  checksums "$multicall_tgz" || fail "$arch" "checksums of $multicall_tgz"
  deb=$(DEB_ARCH=$(arch_debian "$arch") "$repo/scripts/package-deb.sh" "$stages/$arch/bins" "$out" \
    "$stages/$arch/multicall/$multicall_bin") || fail "$arch" "scripts/package-deb.sh failed"
  sums+=("$tgz" "$multicall_tgz" "$(basename "$deb")")
  images+=("$arch=$stages/$arch/multicall")
done
image=cni-rs-image-v$version.tar
rm -f "$out/$image"*
digest=$("$repo/scripts/image.sh" "$out/$image" "${images[@]}") || fail "${arches[*]}" "scripts/image.sh failed"
checksums "$image" || fail "${arches[*]}" "checksums of $image"
echo "image $image: index $digest (${arches[*]})" >&2
sums+=("$image")
(cd "$out" && sha256sum "${sums[@]}" >SHA256SUMS) || fail "${arches[*]}" "writing SHA256SUMS"

echo "wrote $out:" >&2
(cd "$out" && ls -l "${sums[@]}" SHA256SUMS) >&2

if [ -n "$kernel_test" ]; then
  foreign=()
  for arch in "${arches[@]}"; do [ "$arch" = "$(arch_host)" ] || foreign+=("$arch"); done
  if [ ${#foreign[@]} -gt 0 ]; then
    "$repo/scripts/arch-test.sh" --dist "$out" "${foreign[@]}" || fail "${foreign[*]}" "the kernel test failed"
  fi
fi
