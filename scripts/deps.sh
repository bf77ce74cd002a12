# Sourced by the demo and test scripts: installs what they need on a fresh
# Debian machine (as root), only when it is missing.

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: $1 needs root (network namespaces, netlink): run it as root" >&2
    exit 1
  fi
}

apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { apt-get update -qq >/dev/null; apt_updated=1; }
  echo "installing $*" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
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

# The Go reference plugins (Debian's containernetworking-plugins, under
# /usr/lib/cni) and go-cnitool (the upstream Go libcni, as containerd and
# CRI-O call plugins), the yardsticks of the compatibility tests.
ensure_reference_tools() {
  [ -x /usr/lib/cni/bridge ] || apt_install containernetworking-plugins
  if ! command -v go-cnitool >/dev/null 2>&1; then
    local build
    for build in "$repo/../shared/tools/go-cnitool/build.sh" "${GO_CNITOOL_BUILD:-}"; do
      if [ -n "$build" ] && [ -f "$build" ]; then
        sh "$build" /usr/local/bin >&2
        break
      fi
    done
  fi
  if ! command -v go-cnitool >/dev/null 2>&1; then
    echo "warning: go-cnitool is not available (../shared/tools/go-cnitool missing): its tests will say SKIPPED" >&2
  fi
  # go-cni-cri: containerd's go-cni, called as containerd 1.6's CRI calls it.
  if ! command -v go-cni-cri >/dev/null 2>&1; then
    local build
    for build in "$repo/../shared/tools/go-cni-cri/build.sh" "${GO_CNI_CRI_BUILD:-}"; do
      if [ -n "$build" ] && [ -f "$build" ]; then
        sh "$build" /usr/local/bin >&2
        break
      fi
    done
  fi
  if ! command -v go-cni-cri >/dev/null 2>&1; then
    echo "warning: go-cni-cri is not available (../shared/tools/go-cni-cri missing): its tests will say SKIPPED" >&2
  fi
}

# What the release and install tests use (tests/tests/release.rs,
# install.rs): python3 (scripts/suite.sh reads cargo metadata with it),
# objcopy, dpkg-deb, unshare, and Go libcni's sources for the VERSION check
# through invoke.GetVersionInfo.
ensure_release_test_deps() {
  ensure_cmd python3 python3
  ensure_cmd objcopy binutils
  ensure_cmd dpkg-deb dpkg
  ensure_cmd unshare util-linux
  if ! command -v go >/dev/null 2>&1 ||
    [ ! -d /usr/share/gocode/src/github.com/containernetworking/cni/pkg/invoke ]; then
    apt_install golang-go golang-github-appc-cni-dev
  fi
}

# firewalld and dbus-daemon for the firewall plugin's firewalld tests, which
# start their own on a private bus in a throwaway mount and network namespace
# (tests/src/firewalld.rs), never the machine's. Installing must not start
# the machine's firewalld: a policy-rc.d refuses service starts meanwhile.
ensure_firewalld() {
  ensure_cmd dbus-daemon dbus-daemon
  command -v firewalld >/dev/null 2>&1 && return
  local guard=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=1
  fi
  apt_install --no-install-recommends firewalld
  [ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d
}
