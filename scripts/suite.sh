# Sourced by the release and packaging scripts: what the suite is, read from
# the workspace itself so that a new plugin crate is in the release with no
# list to edit.
#
# suite_bins: every bin target of every workspace member, sorted, except
# the members whose Cargo.toml says
#   [package.metadata.cni-rs]
#   release = false
# (the benchmark and the test harness).
# The multicall binary's crate says
#   [package.metadata.cni-rs]
#   form = "multicall"
# and is left out of suite_bins too: it has a tarball of its own.
# suite_multicall: "<package> <bin>" of that crate.
# suite_version: the workspace's version (libcni's, which every crate shares).

suite_metadata_json=
suite_metadata() {
  if [ -z "$suite_metadata_json" ]; then
    suite_metadata_json=$(cd "$repo" && cargo metadata --no-deps --format-version 1 --locked)
  fi
  printf '%s' "$suite_metadata_json"
}

suite_bins() {
  suite_metadata | python3 -c '
import json, sys
m = json.load(sys.stdin)
members = set(m["workspace_members"])
names = set()
for p in m["packages"]:
    if p["id"] not in members:
        continue
    ours = (p.get("metadata") or {}).get("cni-rs") or {}
    if ours.get("release") is False or ours.get("form") == "multicall":
        continue
    names.update(t["name"] for t in p["targets"] if "bin" in t["kind"])
print("\n".join(sorted(names)))
'
}

suite_multicall() {
  suite_metadata | python3 -c '
import json, sys
m = json.load(sys.stdin)
members = set(m["workspace_members"])
for p in m["packages"]:
    if p["id"] in members and ((p.get("metadata") or {}).get("cni-rs") or {}).get("form") == "multicall":
        print(p["name"], next(t["name"] for t in p["targets"] if "bin" in t["kind"]))
'
}

suite_version() {
  suite_metadata | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["version"] for p in m["packages"] if p["name"] == "libcni"))
'
}
