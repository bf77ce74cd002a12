#!/usr/bin/env bash
# Builds the release binaries of every architecture and writes the release
# artifacts (ARCH: amd64, arm64, arm, ppc64le, s390x, riscv64, mips64le;
# DEBARCH: Debian's name of it, armhf, ppc64el and mips64el for arm,
# ppc64le and mips64le):
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
#   dist/cni-rs-v<version>-vendored.tar.gz           the source release: the tracked
#                                                    source with every crate of
#                                                    Cargo.lock in vendor/ (`cargo
#                                                    vendor`), which builds offline
#   dist/<artifact>.spdx.json                        each artifact's SPDX 2.3 SBOM, named
#                                                    after it (cni-rs-linux-amd64-v0.1.0.spdx.json,
#                                                    cni-rs_0.1.0_amd64.spdx.json): the
#                                                    artifact with its checksums, each
#                                                    binary in it, every crate they link
#                                                    (version, license, purl, checksum)
#   dist/*.sha256, *.sha512                          of every artifact and SBOM
#   dist/SHA256SUMS                                  `sha256sum` of the tarballs, the
#                                                    packages, the image, the source
#                                                    release and the SBOMs
#
# Every binary embeds the list of crates it links (cargo auditable), which
# `cargo audit bin`, Trivy and Grype read. Every tarball holds LICENSE and
# THIRD-PARTY-NOTICES: the licenses and notices of exactly the crates its
# binaries link (scripts/bom.py, with cargo-about's texts); the package
# holds them in /usr/share/doc/cni-rs, with a DEP-5 copyright made from the
# same data, and the image in /usr/share/doc/cni-rs, with the SBOM of its
# binary (docs/install.md, "Verify a release").
#
# Then each foreign architecture's multicall form and cnitool run the chain
# test on Debian's kernel of that architecture under QEMU
# (scripts/arch-test.sh); a failure fails the release.
#
# Usage: scripts/release.sh [--out DIR] [--arch ARCH,ARCH] [--only NAME,NAME]
#                           [--no-kernel-test]
#   --out DIR    write there instead of dist/
#   --arch ...   these architectures only (default: all seven)
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
# release tree); DEB_MAINTAINER (scripts/package-deb.sh); CNI_RS_SOURCE_URL
# and CNI_RS_REVISION (the image's annotations, scripts/image.sh).
#
# Run in the source release (its vendor/ and the .cargo/config.toml that
# points there), the build is --offline: nothing is fetched, and the
# binaries are the same bytes as the git checkout's (crates' paths are
# remapped to /crates either way). It writes no source release of its own.
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

# A failed step stops the release, naming the architecture and the step.
# `set -e` alone does not: bash turns it off inside a function called
# under `||`, `&&` or `if`, so build_arch and what it calls check each
# step themselves, and nothing here calls them under one.
fail() { # ARCH WHAT
  echo "error: the release of $1 stops: $2" >&2
  exit 1
}

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
ensure_release_tools || exit 1
offline=()
vendored=
if [ -d "$repo/vendor" ] && grep -q '^\[source.vendored-sources\]' "$repo/.cargo/config.toml" 2>/dev/null; then
  vendored=1
  offline=(--offline)
fi

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
# A crate's source is /crates/<name>-<version> whether it came from the
# registry (extracted under registry/src/<index>, named as its cache dir,
# which the fetch makes) or the source release's vendor/.
if [ -z "$vendored" ]; then
  (cd "$repo" && cargo fetch --locked >/dev/null) || fail "${arches[*]}" "cargo fetch failed"
fi
crate_dirs=$sep--remap-path-prefix=$repo/vendor=/crates
for d in "$cargo_home"/registry/cache/*/; do
  [ -d "$d" ] && crate_dirs+="$sep--remap-path-prefix=$cargo_home/registry/src/$(basename "$d")=/crates"
done
export CARGO_ENCODED_RUSTFLAGS="-Ctarget-feature=+crt-static$sep--remap-path-prefix=$repo=/cni-rs$sep--remap-path-prefix=$cargo_home=/cargo$crate_dirs$sep--remap-path-prefix=$target=/target"
unset RUSTFLAGS
bin_args=()
for b in "${bins[@]}"; do bin_args+=(--bin "$b"); done
stages=$(mktemp -d)
trap 'rm -rf "$stages"' EXIT
chmod 0755 "$stages"

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
    (cd "$repo" && arch_cargo "$arch" auditable build "${offline[@]}" --release --locked --workspace --exclude tests --exclude cri-client \
      --exclude bench --target "$triple" --target-dir "$target" "${bin_args[@]}") ||
      fail "$arch" "cargo build of ${bins[*]} failed"
  fi
  echo "building $multicall_bin (release, $arch, ${#multicall_plugins[@]} plugins)" >&2
  (cd "$repo" && arch_cargo "$arch" auditable build "${offline[@]}" --release --locked --target "$triple" --target-dir "$target" \
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
# The license texts of every crate, from their own files (cargo-about, with
# about.toml); which of them an artifact carries is scripts/bom.py's.
about=$stages/about.json
(cd "$repo" && cargo about generate "${offline[@]}" --locked --format json --workspace -o "$about") ||
  fail "${arches[*]}" "cargo about generate failed"
bom() { python3 "$repo/scripts/bom.py" "$1" --about "$about" "${@:2}"; }
# The SBOM of ARTIFACT (a file of $out) beside it, named after it, with
# its checksums. Each PATH is where BINARY is in the artifact; --vendored
# instead: the source release, every crate of Cargo.lock.
sbom() { # ARTIFACT PURPOSE (PATH BINARY)... | ARTIFACT PURPOSE --vendored
  local artifact=$1 purpose=$2 name members=() binaries=()
  name=${artifact%.tgz}
  name=${name%.tar.gz}
  name=${name%.tar}
  name=${name%.deb}.spdx.json
  shift 2
  if [ "${1:-}" = --vendored ]; then
    members=(--vendored)
  else
    while [ $# -ge 2 ]; do members+=(--member "$1"); binaries+=("$2"); shift 2; done
  fi
  bom spdx --artifact "$out/$artifact" --purpose "$purpose" "${members[@]}" "${binaries[@]}" >"$out/$name" &&
    checksums "$name" && sums+=("$name")
}
# LICENSE and the notices of the crates that BINARY... link, into DIR.
notices() { # DIR BINARY...
  install -m 0644 "$repo/LICENSE" "$1/LICENSE" && bom notices "${@:2}" >"$1/THIRD-PARTY-NOTICES" &&
    chmod 0644 "$1/THIRD-PARTY-NOTICES"
}
rm -f "$out/SHA256SUMS"
sums=()
images=()
image_bins=()
for arch in "${arches[@]}"; do
  tgz=cni-rs-linux-$arch-v$version.tgz
  multicall_tgz=cni-rs-multicall-linux-$arch-v$version.tgz
  deb=cni-rs_${version}_$(arch_debian "$arch").deb
  # An earlier run's artifacts go first: a failed build leaves none.
  rm -f "$out/$tgz"* "$out/$multicall_tgz"* "$out/$deb"* "$out/${tgz%.tgz}.spdx.json"* \
    "$out/${multicall_tgz%.tgz}.spdx.json"* "$out/${deb%.deb}.spdx.json"*
  build_arch "$arch"
  bin_paths=()
  tgz_members=()
  deb_members=()
  for b in "${bins[@]}"; do
    bin_paths+=("$stages/$arch/bins/$b")
    tgz_members+=("./$b" "$stages/$arch/bins/$b")
    deb_members+=("/usr/lib/cni/$b" "$stages/$arch/bins/$b")
  done
  multicall_path=$stages/$arch/multicall/$multicall_bin
  # Notices before packing: the tarballs carry them.
  if [ ${#bins[@]} -gt 0 ]; then
    notices "$stages/$arch/bins" "${bin_paths[@]}" || fail "$arch" "the notices of $tgz"
  fi
  notices "$stages/$arch/multicall" "$multicall_path" || fail "$arch" "the notices of $multicall_tgz"
  pack "$stages/$arch/bins" "$tgz" || fail "$arch" "packing $tgz"
  checksums "$tgz" || fail "$arch" "checksums of $tgz"
  sums+=("$tgz")
  if [ ${#bins[@]} -gt 0 ]; then
    sbom "$tgz" ARCHIVE "${tgz_members[@]}" || fail "$arch" "the SBOM of $tgz"
  fi
  pack "$stages/$arch/multicall" "$multicall_tgz" || fail "$arch" "packing $multicall_tgz"
  checksums "$multicall_tgz" || fail "$arch" "checksums of $multicall_tgz"
  sums+=("$multicall_tgz")
  sbom "$multicall_tgz" ARCHIVE "./$multicall_bin" "$multicall_path" || fail "$arch" "the SBOM of $multicall_tgz"
  written=$(DEB_ARCH=$(arch_debian "$arch") ABOUT_JSON=$about "$repo/scripts/package-deb.sh" \
    "$stages/$arch/bins" "$out" "$multicall_path") || fail "$arch" "scripts/package-deb.sh failed"
  [ "$written" = "$out/$deb" ] || fail "$arch" "scripts/package-deb.sh wrote $written, not $deb"
  checksums "$deb" || fail "$arch" "checksums of $deb"
  sums+=("$deb")
  sbom "$deb" INSTALL "${deb_members[@]}" /usr/sbin/cni-rs "$multicall_path" || fail "$arch" "the SBOM of $deb"
  # The image's platform: the multicall form, and in /usr/share/doc/cni-rs
  # its LICENSE, notices and the SBOM of its binary.
  doc=$stages/$arch/image-doc
  { install -d -m 0755 "$doc" && cp "$stages/$arch/multicall/LICENSE" "$stages/$arch/multicall/THIRD-PARTY-NOTICES" "$doc/" &&
    bom spdx --artifact "$multicall_path" --purpose APPLICATION --member /bin/cni-rs "$multicall_path" \
      >"$doc/cni-rs.spdx.json"; } || fail "$arch" "the image's documents"
  images+=("$arch=$stages/$arch/multicall:$doc")
  image_bins+=("$(arch_oci "$arch")/bin/cni-rs" "$multicall_path")
done
image=cni-rs-image-v$version.tar
rm -f "$out/$image"* "$out/${image%.tar}.spdx.json"*
digest=$("$repo/scripts/image.sh" "$out/$image" "${images[@]}") || fail "${arches[*]}" "scripts/image.sh failed"
checksums "$image" || fail "${arches[*]}" "checksums of $image"
echo "image $image: index $digest (${arches[*]})" >&2
sums+=("$image")
sbom "$image" CONTAINER "${image_bins[@]}" || fail "${arches[*]}" "the SBOM of $image"

# The source release: the tracked files as they are in the work tree (the
# binaries' source), every crate of Cargo.lock in vendor/, and
# .cargo/config.toml pointing cargo there. A source release builds the
# binaries; it is not written again from itself.
source_tgz=cni-rs-v$version-vendored.tar.gz
# The source's files, NUL-separated: git's tracked and not ignored ones in
# a checkout, else every file but the build's outputs (the tree of a copy).
source_files() {
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$repo" ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
      # Deleted in the work tree, not yet committed: not the source.
      [ -e "$repo/$f" ] || [ -L "$repo/$f" ] && printf '%s\0' "$f"
    done
  else
    (cd "$repo" && find . \( -path ./target -o -path ./dist -o -path ./vendor -o -path "./${target#"$repo"/}" \
      -o -path "./${out#"$repo"/}" \) -prune -o \( -type f -o -type l \) -printf '%P\0')
  fi
}
if [ -z "$vendored" ]; then
  rm -f "$out/$source_tgz"* "$out/${source_tgz%.tar.gz}.spdx.json"*
  tree=$stages/source/cni-rs-v$version
  { install -d -m 0755 "$tree" &&
    source_files | (cd "$repo" && xargs -0 cp --parents -P -t "$tree") &&
    (cd "$repo" && cargo vendor --quiet --locked --versioned-dirs "$tree/vendor" >/dev/null) &&
    cat "$repo/scripts/vendored-config.toml" >>"$tree/.cargo/config.toml"; } || fail source "vendoring the source"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mode=go-w \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$stages/source" -cf - "cni-rs-v$version" | gzip -9 -n >"$out/$source_tgz" ||
    fail source "packing $source_tgz"
  checksums "$source_tgz" || fail source "checksums of $source_tgz"
  sums+=("$source_tgz")
  sbom "$source_tgz" SOURCE --vendored || fail source "the SBOM of $source_tgz"
fi
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
