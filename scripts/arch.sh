# Sourced by the release, image and architecture-test scripts: the
# architectures the suite ships for, and how a binary of each is built
# (docs/dependencies-and-build.md, "Architectures").
#
#   arch_names                  the release's architectures, in order
#   arch_host                   this machine's release name (amd64, arm64)
#   arch_target ARCH            Rust's target tuple
#   arch_debian ARCH            Debian's architecture name (the .deb's)
#   arch_oci ARCH               the OCI platform: "arm64", "arm/v7", ...
#   arch_gnu ARCH               the GNU triple of Debian's cross gcc
#   arch_elf_machine ARCH       the ELF machine, as `readelf -h` names it
#   ensure_cross_toolchain ARCH installs what a foreign ARCH's build needs
#   arch_cargo ARCH ARG...      cargo for ARCH, with its compiler and linker
#
# The host's architecture builds with the machine's own Rust (rustup's),
# as it always has. A foreign one builds with Debian's rustc-web and
# cargo-web (one Rust for every foreign target), its std built from
# Debian's rust-web-src (-Zbuild-std, allowed on that stable compiler by
# RUSTC_BOOTSTRAP=1, for this build only), and linked by Debian's
# gcc-<triple> against glibc's libc.a of libc6-dev-<arch>-cross. Why not
# a prebuilt std: rustup cannot fetch targets on these machines, and
# Debian ships a std at rustc-web's version for arm64 only; building it
# from source for every foreign target is one path instead of two, costs
# about a minute per target, and needs no foreign dpkg architecture on
# the build machine.

. "$(dirname "${BASH_SOURCE[0]}")/deps.sh"

arch_names() { echo amd64 arm64 arm ppc64le s390x riscv64 mips64le; }

arch_host() {
  case $(uname -m) in
  x86_64) echo amd64 ;;
  aarch64) echo arm64 ;;
  *) echo "error: no release architecture for this machine ($(uname -m))" >&2; return 1 ;;
  esac
}

arch_field() { # ARCH FIELD(1 target, 2 debian, 3 oci, 4 gnu)
  local row
  case $1 in
  amd64) row="x86_64-unknown-linux-gnu amd64 amd64 x86_64-linux-gnu" ;;
  arm64) row="aarch64-unknown-linux-gnu arm64 arm64 aarch64-linux-gnu" ;;
  arm) row="armv7-unknown-linux-gnueabihf armhf arm/v7 arm-linux-gnueabihf" ;;
  ppc64le) row="powerpc64le-unknown-linux-gnu ppc64el ppc64le powerpc64le-linux-gnu" ;;
  s390x) row="s390x-unknown-linux-gnu s390x s390x s390x-linux-gnu" ;;
  riscv64) row="riscv64gc-unknown-linux-gnu riscv64 riscv64 riscv64-linux-gnu" ;;
  mips64le) row="mips64el-unknown-linux-gnuabi64 mips64el mips64le mips64el-linux-gnuabi64" ;;
  *) echo "error: unknown architecture '$1' (one of: $(arch_names))" >&2; return 1 ;;
  esac
  echo "$row" | cut -d' ' -f"$2"
}
arch_target() { arch_field "$1" 1; }
arch_debian() { arch_field "$1" 2; }
arch_oci() { arch_field "$1" 3; }
arch_gnu() { arch_field "$1" 4; }
arch_elf_machine() {
  case $1 in
  amd64) echo "Advanced Micro Devices X86-64" ;;
  arm64) echo AArch64 ;;
  arm) echo ARM ;;
  ppc64le) echo PowerPC64 ;;
  s390x) echo "IBM S/390" ;;
  riscv64) echo RISC-V ;;
  mips64le) echo "MIPS R3000" ;;
  *) arch_field "$1" 1 ;;
  esac
}

# Debian's packages for a foreign ARCH's build, when missing (apt_install of
# scripts/deps.sh). Needs root and apt; the host architecture needs nothing.
ensure_cross_toolchain() {
  local arch=$1 gnu deb pkgs=()
  [ "$arch" = "$(arch_host)" ] && return 0
  gnu=$(arch_gnu "$arch") && deb=$(arch_debian "$arch") || return 1
  # rustc-web and its std's source, at the workspace's rust-version at
  # least: a machine that installed them from stale package lists has an
  # older one, which apt_install upgrades (it updates the lists first).
  rustc_web_current && [ -d /usr/lib/rustlib/src/rust/library/std ] || pkgs+=(rustc-web cargo-web rust-web-src)
  command -v "$gnu-gcc" >/dev/null || pkgs+=("gcc-$gnu")
  [ -f "/usr/$gnu/lib/libc.a" ] || pkgs+=("libc6-dev-$deb-cross")
  [ ${#pkgs[@]} -eq 0 ] && return 0
  apt_install --no-install-recommends "${pkgs[@]}" || {
    echo "error: apt-get install ${pkgs[*]} (the $arch build) failed" >&2
    return 1
  }
  rustc_web_current || {
    echo "error: Debian's rustc-web is $(/usr/bin/rustc --version), older than the workspace's rust-version" >&2
    return 1
  }
}

# Debian's rustc and cargo are installed, at the workspace's rust-version
# or newer.
rustc_web_current() {
  local need have
  [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] || return 1
  need=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml")
  have=$(/usr/bin/rustc --version | cut -d' ' -f2)
  [ -n "$need" ] && [ "$(printf '%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ]
}

# ARCH's codegen flags beyond the release's, one per line. mips64le's
# code is the largest (fixed-size instructions, every global loaded from
# the GOT in three instructions): optimized for size alone, its multicall
# binary keeps under the 6 MB bound (docs/dependencies-and-build.md).
arch_rustflags() {
  case $1 in
  mips64le) echo -Copt-level=z ;;
  esac
}

# cargo for ARCH: the machine's own for the host's architecture; Debian's
# rustc-web with -Zbuild-std and the cross linker for a foreign one. The
# caller passes --target "$(arch_target ARCH)" and its other flags.
arch_cargo() {
  local arch=$1 target gnu var
  shift
  if [ "$arch" = "$(arch_host)" ]; then
    cargo "$@"
    return
  fi
  target=$(arch_target "$arch") && gnu=$(arch_gnu "$arch") || return 1
  var=$(echo "$target" | tr 'a-z-' 'A-Z_')
  # ARCH's own flags after the caller's (set only when there are some).
  local encoded=${CARGO_ENCODED_RUSTFLAGS:-} flags=() f
  for f in $(arch_rustflags "$arch"); do encoded=${encoded:+$encoded$'\x1f'}$f; done
  [ -z "$encoded" ] || flags=("CARGO_ENCODED_RUSTFLAGS=$encoded")
  env "${flags[@]}" RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
    "CARGO_TARGET_${var}_LINKER=$gnu-gcc" "CC_${target//-/_}=$gnu-gcc" "AR_${target//-/_}=$gnu-ar" \
    /usr/bin/cargo "$@" -Zbuild-std=std,panic_unwind
}
