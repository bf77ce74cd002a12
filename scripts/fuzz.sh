#!/usr/bin/env bash
# Fuzzing the suite's parsers with cargo-fuzz (libFuzzer), on the stable
# toolchain: cargo-fuzz needs nightly-only flags (-Zsanitizer, ...), which
# RUSTC_BOOTSTRAP=1 lets a stable rustc accept.
#
#   scripts/fuzz.sh                      every target, FUZZ_SECS (default 60) s each
#   scripts/fuzz.sh run TARGET [ARG...]  one target; ARGs go to libFuzzer
#                                        (-max_total_time=N, or input files
#                                        to replay one crash)
#   scripts/fuzz.sh cmin TARGET          merge what the fuzzer found into the
#                                        committed corpus, minimised
#   scripts/fuzz.sh list                 the targets
#
# Targets (fuzz/fuzz_targets/, checks in fuzz/src/checks.rs): netconf,
# skel, result_versions, cni_args, subnet_env, plugin_config, dhcp_message.
#
# The committed seed corpus (fuzz/corpus/<target>) is only read; new inputs
# go to fuzz/corpus-work/<target> (not committed). A crash leaves its input
# in fuzz/artifacts/<target>/ and makes this script exit non-zero. `cargo
# test` replays fuzz/corpus through the same checks (libcni/tests/
# fuzz_corpus.rs), without the fuzzer.
#
# Environment: FUZZ_SECS (per target, default 60), FUZZ_SANITIZER (address,
# or none for ~2x the executions; default address), FUZZ_RSS_MB (default
# 2048).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo/fuzz"

export RUSTC_BOOTSTRAP=1
secs=${FUZZ_SECS:-60}
sanitizer=${FUZZ_SANITIZER:-address}
rss=${FUZZ_RSS_MB:-2048}
targets=(netconf skel result_versions cni_args subnet_env plugin_config dhcp_message)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

fuzz() { cargo +stable fuzz "$@"; }

run_one() {
  local t=$1
  shift
  mkdir -p "corpus-work/$t"
  fuzz run -O -s "$sanitizer" "$t" "corpus-work/$t" "corpus/$t" -- \
    -rss_limit_mb="$rss" -print_final_stats=1 "$@"
}

case "${1:-all}" in
  list)
    printf '%s\n' "${targets[@]}"
    ;;
  run)
    [ $# -ge 2 ] || { echo "usage: $0 run TARGET [libFuzzer args...]" >&2; exit 2; }
    t=$2
    shift 2
    run_one "$t" "$@"
    ;;
  cmin)
    [ $# -eq 2 ] || { echo "usage: $0 cmin TARGET" >&2; exit 2; }
    mkdir -p "corpus-work/$2"
    fuzz run -O -s "$sanitizer" "$2" -- -merge=1 "corpus/$2" "corpus-work/$2"
    ;;
  all)
    status=0
    summary=()
    for t in "${targets[@]}"; do
      log=$(mktemp)
      start=$(date +%s)
      if run_one "$t" -max_total_time="$secs" 2>&1 | tee "$log" | grep -E '^(Done|==[0-9]+==|SUMMARY|thread)' ; then :; fi
      rc=${PIPESTATUS[0]}
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
      took=$(( $(date +%s) - start ))
      if [ "$rc" -ne 0 ]; then
        status=1
        echo "---- $t failed (exit $rc); the end of its output:" >&2
        tail -n 40 "$log" >&2
        summary+=("$t: FAILED (exit $rc): see above; a crashing input is in fuzz/artifacts/$t/")
      else
        summary+=("$t: ${runs:-?} runs in ${secs} s of fuzzing (${took} s with the build), no crash")
      fi
      rm -f "$log"
    done
    printf '%s\n' "${summary[@]}"
    exit $status
    ;;
  *)
    echo "usage: $0 [all|list|run TARGET [ARGS...]|cmin TARGET]" >&2
    exit 2
    ;;
esac
