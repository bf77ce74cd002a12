# Sourced by the demo and test scripts: installs what they need on a fresh
# Debian machine (as root), only when it is missing.

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: $1 needs root (network namespaces, netlink): run it as root" >&2
    exit 1
  fi
}

# Where cargo puts this machine's builds of PROFILE: target/<host tuple>/PROFILE
# (.cargo/config.toml names the target, for static binaries).
build_dir() { echo "$repo/target/$(rustc --print host-tuple)/$1"; }

apt_updated=
# Checked by hand: callers use it under `||`, where `set -e` is off.
apt_install() {
  if [ -z "$apt_updated" ]; then
    apt-get update -qq >/dev/null || { echo "error: apt-get update failed" >&2; return 1; }
    apt_updated=1
  fi
  echo "installing $*" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >/dev/null ||
    { echo "error: apt-get install $* failed" >&2; return 1; }
}

# ensure_cmd COMMAND PACKAGE
ensure_cmd() {
  command -v "$1" >/dev/null 2>&1 || apt_install "$2"
}

ensure_runtime_deps() {
  ensure_cmd ip iproute2
  ensure_cmd ping iputils-ping
  ensure_cmd nft nftables
  ensure_cmd iptables-restore iptables
  ensure_cmd sha512sum coreutils
  # The DHCP server the dhcp plugin's tests and benchmark run in a throwaway "LAN" namespace.
  [ -x /usr/sbin/dnsmasq ] || apt_install dnsmasq-base
}

# The throwaway namespaces of test and benchmark processes that have
# ended: `cnit-<pid>-...` (the tests' Netns), `cnit-bench-<pid>-...` (the
# benchmark's). A process killed with SIGKILL never ran its guard, so its
# namespaces stay until a later run removes them; a live process's are
# its own.
namespace_owner_ended() { # NAME
  local pid=${1#cnit-}
  pid=${pid#bench-}
  pid=${pid%%-*}
  case $pid in '' | *[!0-9]*) return 1 ;; esac
  ! kill -0 "$pid" 2>/dev/null
}
throwaway_namespaces() {
  local all
  all=$(ip netns list) || { echo "error: ip netns list failed" >&2; return 1; }
  # None is the usual answer (grep's 1).
  awk '{print $1}' <<<"$all" | grep -E '^cnit-(bench-)?[0-9]' || [ $? -eq 1 ]
}
ended_namespaces() {
  local ns
  for ns in $(throwaway_namespaces); do
    if namespace_owner_ended "$ns"; then echo "$ns"; fi
  done
}
# Those of ended processes that were not there at the start, whose names
# are BEFORE: the run's own leaks. A namespace there before the run is
# another process's, even when that process ends during the run (or its
# pid was reused by one alive when the run started).
ended_namespaces_since() { # BEFORE
  local ns
  for ns in $(ended_namespaces); do
    case " $1 " in *" $ns "*) ;; *) echo "$ns" ;; esac
  done
}

# CNI_TEST_SKIP: the one way to leave a step of the suite out on purpose, a
# comma-separated list of step names:
#   fullkernel   the full-kernel VM step (scripts/vm/run.sh)
#   arch         the arm64 and s390x kernel step (scripts/arch-test.sh)
#   containerd   the tests that start a real containerd (tests/tests/containerd.rs)
#   go-clients   the tests' calls through go-cni-cri and go-cnitool
# A skipped step says SKIPPED in the last lines of scripts/test.sh. Under
# CI=true it is refused: CI runs every step. Anything else a step needs and
# cannot get fails the run, saying what is missing.
skip_step() {
  case ",${CNI_TEST_SKIP:-}," in *",$1,"*) return 0 ;; esac
  return 1
}
check_skip_setting() {
  local step
  [ -n "${CNI_TEST_SKIP:-}" ] || return 0
  if [ "${CI:-}" = true ]; then
    echo "error: CNI_TEST_SKIP=$CNI_TEST_SKIP is set under CI=true: CI runs every step" >&2
    exit 1
  fi
  for step in ${CNI_TEST_SKIP//,/ }; do
    case $step in fullkernel | arch | containerd | go-clients) ;;
    *)
      echo "error: CNI_TEST_SKIP: unknown step '$step' (fullkernel, arch, containerd, go-clients)" >&2
      exit 1
      ;;
    esac
  done
}

# The Go reference plugins (Debian's containernetworking-plugins, under
# /usr/lib/cni), the yardstick of the compatibility tests.
ensure_reference_tools() {
  [ -x /usr/lib/cni/bridge ] || apt_install containernetworking-plugins
}

# The Go clients of tests/go/, built from this repository into
# target/go-clients/ (where the tests look for them) when missing or older
# than their source:
#   go-cni-cri  containerd's go-cni, called as containerd 1.6's CRI calls it
#   go-cnitool  a cnitool on the upstream Go libcni (CRI-O, podman, multus)
#   vercheck    Go libcni's VERSION exchange with a plugin
#   nomad-cni   Nomad's plugin fingerprint and its bridge-mode calls
#   nerdctl-cni nerdctl's firewall probe, network conflists and OCI hook calls
# With Debian's Go and the libraries' Debian packages, in GOPATH mode: no
# module download.
ensure_go_clients() {
  skip_step go-clients && return 0
  if ! command -v go >/dev/null 2>&1 ||
    [ ! -d /usr/share/gocode/src/github.com/containerd/go-cni ] ||
    [ ! -d /usr/share/gocode/src/github.com/containernetworking/cni/libcni ] ||
    [ ! -d /usr/share/gocode/src/github.com/hashicorp/go-version ] ||
    [ ! -d /usr/share/gocode/src/github.com/Masterminds/semver ]; then
    apt_install golang-go golang-github-containerd-go-cni-dev golang-github-appc-cni-dev \
      golang-github-hashicorp-go-version-dev golang-github-masterminds-semver-dev
  fi
  local out=$repo/target/go-clients src name work
  mkdir -p "$out"
  for src in "$repo"/tests/go/*/main.go; do
    name=$(basename "$(dirname "$src")")
    [ "$out/$name" -nt "$src" ] && continue
    work=$(mktemp -d)
    mkdir -p "$work/src/$name"
    cp "$src" "$work/src/$name/"
    if ! (cd "$work/src/$name" && GO111MODULE=off GOFLAGS= GOPATH="$work:/usr/share/gocode" \
      GOCACHE="$out/.cache" go build -o "$out/$name.new" .); then
      rm -rf "$work"
      echo "error: building the Go client $name (tests/go/$name) failed" >&2
      return 1
    fi
    mv -f "$out/$name.new" "$out/$name"
    rm -rf "$work"
    echo "built target/go-clients/$name" >&2
  done
}

# containerd 1.6 and runc (Debian's), for tests/tests/containerd.rs, which
# starts its own containerd in throwaway namespaces, never the machine's;
# busybox-static, from which that test builds its sandbox image. Installing
# must not start the machine's containerd: a policy-rc.d refuses service
# starts meanwhile.
ensure_containerd() {
  skip_step containerd && return 0
  command -v containerd >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 &&
    [ -x /bin/busybox ] && return 0
  with_services_held apt_install --no-install-recommends containerd runc busybox-static
}

# A real podman on its CNI backend (Debian's 4.3: Go libcni 1.1.2, runc,
# conmon) for tests/tests/podman.rs's reboot test, which runs containers
# from a busybox-static root file system.
ensure_podman() {
  command -v podman >/dev/null 2>&1 && command -v conmon >/dev/null 2>&1 &&
    command -v runc >/dev/null 2>&1 && [ -x /bin/busybox ] && return 0
  with_services_held apt_install --no-install-recommends podman conmon runc busybox-static
}

# Runs "$@" with a policy-rc.d that refuses every service start, unless one
# is there already. A trap removes it if the run is interrupted: left
# behind, no service of the machine could start again.
with_services_held() {
  local rc=0 exit_trap
  if [ -e /usr/sbin/policy-rc.d ]; then
    "$@"
    return
  fi
  exit_trap=$(trap -p EXIT)
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  trap 'rm -f /usr/sbin/policy-rc.d; exit 130' INT TERM
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  "$@" || rc=$?
  rm -f /usr/sbin/policy-rc.d
  trap - INT TERM
  if [ -n "$exit_trap" ]; then eval "$exit_trap"; else trap - EXIT; fi
  return $rc
}

# What the release and install tests use (tests/tests/release.rs,
# install.rs): python3 (scripts/suite.sh reads cargo metadata with it),
# objcopy, dpkg-deb, unshare, umoci (the image, also for tests/daemonset.rs),
# and Go libcni's sources for the VERSION check
# through invoke.GetVersionInfo.
ensure_release_test_deps() {
  ensure_cmd python3 python3
  ensure_cmd objcopy binutils
  # The container image (scripts/image.sh); `file` on the static binaries.
  ensure_cmd umoci umoci
  ensure_cmd file file
  ensure_cmd dpkg-deb dpkg
  ensure_cmd unshare util-linux
  if ! command -v go >/dev/null 2>&1 ||
    [ ! -d /usr/share/gocode/src/github.com/containernetworking/cni/pkg/invoke ]; then
    apt_install golang-go golang-github-appc-cni-dev
  fi
}

# A real Prometheus and promtool (Debian's prometheus) for
# tests/tests/metrics.rs, which starts its own in a throwaway namespace,
# never the machine's service: a policy-rc.d refuses service starts while
# it installs.
ensure_prometheus() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && return
  with_services_held apt_install --no-install-recommends prometheus
}

# checkov (PyPI), the Kubernetes manifest scanner tests/tests/daemonset.rs
# runs on deploy/ (docs/install.md lists the checks it may fail).
ensure_checkov() {
  command -v checkov >/dev/null 2>&1 && return
  echo "installing checkov (pip)" >&2
  python3 -m pip install --quiet --root-user-action=ignore checkov ||
    { echo "error: pip install checkov failed" >&2; return 1; }
}

# firewalld and dbus-daemon for the firewall plugin's firewalld tests, which
# start their own on a private bus in a throwaway mount and network namespace
# (tests/src/firewalld.rs), never the machine's. Installing must not start
# the machine's firewalld: a policy-rc.d refuses service starts meanwhile.
ensure_firewalld() {
  ensure_cmd dbus-daemon dbus-daemon
  command -v firewalld >/dev/null 2>&1 && return
  with_services_held apt_install --no-install-recommends firewalld
}

# The release's cargo tools, from crates.io at pinned versions, built once
# into CNI_RS_TOOLS_DIR (default ~/.cache/cni-rs-tools, kept between runs:
# a fresh machine pays about 15 minutes of builds once) and put on PATH:
#   cargo-auditable  embeds each binary's dependency list (scripts/release.sh)
#   cargo-about      the license texts of the notices (scripts/bom.py)
#   cargo-deny       the license and source policy (deny.toml; .ci/run)
#   cargo-audit      `cargo audit bin` on the release (tests/tests/supply_chain.rs)
# ensure_cargo_tool NAME VERSION [FEATURES]
ensure_cargo_tool() {
  local name=$1 version=$2 root
  root=${CNI_RS_TOOLS_DIR:-$HOME/.cache/cni-rs-tools}/$name-$version
  if [ ! -x "$root/bin/$name" ]; then
    echo "installing $name $version (cargo install, into $root)" >&2
    cargo install --quiet --locked --root "$root" ${3:+"--features=$3"} "$name" --version "$version" ||
      { echo "error: cargo install $name $version failed" >&2; return 1; }
  fi
  case ":$PATH:" in *":$root/bin:"*) ;; *) PATH=$root/bin:$PATH ;; esac
  export PATH
}
ensure_release_tools() {
  ensure_cargo_tool cargo-auditable 0.7.7 && ensure_cargo_tool cargo-about 0.9.3 cli
}
ensure_supply_chain_tools() {
  ensure_release_tools && ensure_cargo_tool cargo-deny 0.20.2 && ensure_cargo_tool cargo-audit 0.22.2 || return 1
  # The SBOM validators (PyPI): SPDX's own tools and NTIA's minimum elements.
  python3 -c 'import spdx_tools, ntia_conformance_checker' 2>/dev/null && return
  echo "installing spdx-tools and ntia-conformance-checker (pip)" >&2
  python3 -m pip install --quiet --root-user-action=ignore spdx-tools==0.8.5 ntia-conformance-checker==6.0.0 ||
    { echo "error: pip install spdx-tools ntia-conformance-checker failed" >&2; return 1; }
}
