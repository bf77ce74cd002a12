# Sourced by scripts/test.sh: the full-kernel step. This machine's kernel
# has no 802.1Q VLAN, ipvlan, dummy or VRF links and no bridge VLAN
# filtering; scripts/vm/run.sh boots Debian's full kernel in a VM over this
# machine's own filesystem, so what is built here runs there. A boot costs
# about 6 s (more on a loaded machine), so the whole step is
# ONE VM call that runs a queue of commands, in order:
#
#   fullkernel_add CMD [ARG...]     queue one command (run from the repo
#                                   root, stdin /dev/null, with this env)
#   fullkernel_add_tests [FILTER]   queue every test binary of the workspace
#                                   (built here by `cargo test --no-run`)
#                                   that has tests matching FILTER (default
#                                   `fullkernel_`; asked here with --list,
#                                   since each binary start costs about a
#                                   second in the VM), with that filter and
#                                   three test threads
#   fullkernel_run                  boot once, run the queue; non-zero when a
#                                   command failed or the VM could not start,
#                                   with a message saying which
#
# Other steps that need the full kernel (a package test, ...) queue their
# commands with fullkernel_add before scripts/test.sh calls fullkernel_run.
# Inside the VM FULLKERNEL_GUEST=1 is set; tests named fullkernel_* run
# for real there, and say on other kernels that this step runs them.

# The runner: FULLKERNEL_TOOL, else this repository's scripts/vm/run.sh.
FULLKERNEL_TOOL=${FULLKERNEL_TOOL:-$repo/scripts/vm/run.sh}
fullkernel_queue=()

fullkernel_add() {
  local q
  printf -v q '%q ' "$@"
  fullkernel_queue+=("$q")
}

fullkernel_add_tests() {
  local filter=${1:-fullkernel_} json bins bin
  json=$(cargo test --workspace --no-run --message-format=json) || {
    echo "fullkernel: building the test binaries failed" >&2
    return 1
  }
  # The test harness executables: compiler artifacts of test profile, in
  # target/*/deps.
  bins=$(printf '%s\n' "$json" | grep '"test":true' \
    | grep -o '"executable":"[^"]*/deps/[^"]*"' | sed 's/^"executable":"//; s/"$//' | sort -u)
  [ -n "$bins" ] || { echo "fullkernel: no test binaries found" >&2; return 1; }
  local n=0
  local listed
  for bin in $bins; do
    # A binary that cannot list its tests fails the step: its tests
    # would be left out without a word.
    listed=$("$bin" "$filter" --list) || {
      echo "fullkernel: $bin --list failed" >&2
      return 1
    }
    grep -q ': test$' <<<"$listed" || continue
    fullkernel_add "$bin" "$filter" --test-threads=3
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "fullkernel: no test matches $filter" >&2; return 1; }
}

fullkernel_run() {
  local guest rc start end
  if [ ${#fullkernel_queue[@]} -eq 0 ]; then
    echo "fullkernel: nothing queued" >&2
    return 0
  fi
  if [ ! -x "$FULLKERNEL_TOOL" ]; then
    echo "error: fullkernel: $FULLKERNEL_TOOL is missing: the full-kernel step cannot run" >&2
    return 1
  fi
  guest=$(mktemp /tmp/fullkernel-queue.XXXXXX)
  {
    echo 'echo "fullkernel: guest up ($(uname -r))"'
    echo 'failed=()'
    local c
    for c in "${fullkernel_queue[@]}"; do
      printf "printf '== fullkernel: %%s\\n' %q\n" "$c"
      echo 's=$(date +%s.%N)'
      printf '%s</dev/null || failed+=(%q)\n' "$c" "$c"
      echo 'awk "BEGIN{printf \"== fullkernel: %.1f s\\n\", $(date +%s.%N) - $s}"'
    done
    echo 'if [ ${#failed[@]} -gt 0 ]; then printf "fullkernel: FAILED: %s\n" "${failed[@]}" >&2; exit 1; fi'
    echo "echo 'fullkernel: all ${#fullkernel_queue[@]} commands passed'"
  } >"$guest"
  echo "fullkernel: one VM call for ${#fullkernel_queue[@]} commands" >&2
  start=$(date +%s)
  "$FULLKERNEL_TOOL" bash "$guest" 2>&1 | tee "$guest.log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s)
  echo "fullkernel: the VM step took $((end - start)) s (exit $rc)" >&2
  if ! grep -q '^fullkernel: guest up' "$guest.log"; then
    echo "error: fullkernel: the VM did not start (run.sh exit $rc; 125: run.sh failed, see above)" >&2
    rc=1
  elif [ "$rc" -eq 255 ]; then
    echo "error: fullkernel: the guest kernel died (run.sh exit 255)" >&2
  elif [ "$rc" -ne 0 ]; then
    echo "error: fullkernel: a command in the VM failed (exit $rc)" >&2
  fi
  rm -f "$guest" "$guest.log"
  [ "$rc" -eq 0 ]
}
