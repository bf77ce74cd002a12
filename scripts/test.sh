#!/usr/bin/env bash
# The whole test suite: unit tests and black-box tests in throwaway network
# namespaces (through our cnitool, the Go clients of tests/go and a real
# containerd of its own), the chains again against the multicall form and
# the release's binaries, the chain on arm64's and s390x's own kernels
# (scripts/arch-test.sh), then the fullkernel_* tests in one VM with
# Debian's full kernel (scripts/fullkernel.sh). Installs what it needs; run
# as root on Debian, from a clone with nothing beside it. CNI_TEST_SKIP
# leaves named steps out on purpose (scripts/deps.sh); never in CI.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. scripts/deps.sh
need_root "the test suite"
check_skip_setting
ensure_runtime_deps
ensure_reference_tools
ensure_go_clients
ensure_containerd
ensure_podman
ensure_release_test_deps
ensure_firewalld
ensure_prometheus
ensure_checkov
ensure_supply_chain_tools
ensure_cmd lintian lintian
# The test release's package is maintained by whoever made the commit
# under test (scripts/package-deb.sh wants a real Maintainer).
DEB_MAINTAINER=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>')}
export DEB_MAINTAINER

# What killed runs left (their own guard never ran) is not this run's:
# removed before it, so that the check at the end sees only this run's.
for ns in $(ended_namespaces); do
  echo "note: removing $ns, left by a process that has ended" >&2
  # Another run may remove it meanwhile.
  ip netns del "$ns" || true
done
before=$(throwaway_namespaces | tr '\n' ' ')

cargo build --workspace --bins
status=0
# The fullkernel_* tests need link kinds this kernel lacks: they run in the
# full-kernel step below, and are skipped here.
args=("$@")
case " ${args[*]} " in
  *" -- "*) args+=(--skip fullkernel_) ;;
  *) args+=(-- --skip fullkernel_) ;;
esac
cargo test --workspace --no-fail-fast "${args[@]}" || status=$?

# The multicall form: the chains through the three clients and real
# containerd again (kube-flannel's, bridge + portmap + bandwidth, kindnet's
# ptp, podman's, multus macvlan), Nomad's and nerdctl's probes and
# networks, and every plugin's --version and VERSION,
# against `cni-rs` and a link per plugin. The whole black-box suite runs the
# same way: CNI_TEST_BIN_DIR=target/multicall-test cargo test -p tests.
scripts/multicall-bin.sh "$(build_dir debug)" target/multicall-test
multicall=(env CNI_TEST_BIN_DIR="$repo/target/multicall-test" cargo test -p tests --test suite --no-fail-fast)
"${multicall[@]}" -- clients:: containerd:: podman:: ptp:: nomad:: nerdctl:: || status=$?
"${multicall[@]}" -- release::every_binary release::go_libcni || status=$?
"${multicall[@]}" -- empty_root:: || status=$?

# The release form: the tarball's binaries and the multicall tarball's
# cni-rs, as scripts/release.sh ships them, in the empty root and through
# the DaemonSet (its image built from that cni-rs); the docs' sizes are
# checked against them (tests/tests/tidy.rs). Then what a distribution and
# a scanner check (tests/tests/supply_chain.rs): the SBOMs, validated and
# against what the binaries embed, `cargo audit bin`, the notices, lintian,
# the image's annotations, and the source release built offline; and the
# package itself installed over Debian's Go plugins in the full-kernel VM.
release_out=$repo/target/release-test
rm -rf "$release_out"
# This machine's architecture only: the others are the arch step's.
if scripts/release.sh --arch "$(. scripts/arch.sh && arch_host)" --out "$release_out/dist"; then
  mkdir -p "$release_out/bin"
  tar -xzf "$release_out"/dist/cni-rs-linux-*.tgz -C "$release_out/bin"
  tar -xzf "$release_out"/dist/cni-rs-multicall-linux-*.tgz -C "$release_out/bin" ./cni-rs
  env CNI_TEST_BIN_DIR="$release_out/bin" CNI_TEST_RELEASE=1 CNI_TEST_DIST="$release_out/dist" \
    cargo test -p tests --test suite --no-fail-fast \
    -- empty_root:: daemonset:: tidy::the_sizes supply_chain:: release::the_package_replaces || status=$?
else
  echo "error: scripts/release.sh failed: the release form is not tested" >&2
  status=1
fi

# Other architectures: the multicall form and cnitool of arm64 and of s390x
# (big-endian: netlink in host order, nftables payloads in network order),
# built as the release builds them, run the chain on Debian's kernel of
# their own architecture under QEMU (scripts/arch-test.sh; arm and ppc64le
# run it from scripts/release.sh).
if ! skip_step arch; then
  scripts/arch-test.sh arm64 s390x || status=1
fi

# The full-kernel step: one VM boot (scripts/fullkernel.sh) runs every
# fullkernel_* test of every test binary built here. Other steps that need
# the full kernel queue their commands with fullkernel_add before the run.
. scripts/fullkernel.sh
if skip_step fullkernel; then
  :
elif fullkernel_add_tests fullkernel_; then
  fullkernel_run || status=1
else
  status=1
fi

# Every throwaway namespace (cnit-<pid>-<n>-<tag> of the tests,
# cnit-bench-<pid>-... of the benchmark) that this run made, of a process
# that has ended, must be gone, whatever happened; a live process's, or
# one there before the run, is another run's.
left=$(ended_namespaces_since "$before")
if [ -n "$left" ]; then
  echo "error: test namespaces left behind:" $left >&2
  # Reported and failed already; the removal is best effort.
  for ns in $left; do ip netns del "$ns" || true; done
  status=1
fi
# What was left out on purpose, last, where it is seen.
for step in fullkernel arch containerd go-clients; do
  skip_step "$step" && echo "SKIPPED: the $step step (CNI_TEST_SKIP=$CNI_TEST_SKIP)" >&2
done
exit $status
