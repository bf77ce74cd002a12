#!/usr/bin/env bash
# Writes the suite's container image, FROM scratch, as an OCI image archive
# (scripts/release.sh calls it with its multicall stage):
#
#   scripts/image.sh MULTICALL_DIR OUT_TAR
#
# MULTICALL_DIR holds the static multicall binary cni-rs and a link per
# plugin to it (the multicall tarball's files); they go to /bin of the
# image's one layer, and nothing else does: no shell, no libc. The entry
# point is /bin/cni-rs, so a container's args choose what it does
# (deploy/cni-rs.yaml: `install /host/opt/cni/bin`, then `gc --apply
# --every 10m`). OUT_TAR is the OCI image layout (index.json, oci-layout,
# blobs/) as a tar, tagged with the suite's version:
#
#   ctr -n k8s.io images import --base-name localhost/cni-rs OUT_TAR
#
# names it localhost/cni-rs:<version>. Written with umoci (Debian's),
# reproducibly: the layer is a sorted tar of root-owned files dated
# SOURCE_DATE_EPOCH (default: the last commit's time), the config and
# history carry that date, and the archive is sorted and dated the same:
# the same binaries give the same digest and the same bytes. Prints the
# image's manifest digest.
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/suite.sh"

if [ $# -ne 2 ]; then
  echo "usage: $0 MULTICALL_DIR OUT_TAR" >&2
  exit 2
fi
src=$1
out=$2
if [ ! -x "$src/cni-rs" ]; then
  echo "error: $src/cni-rs is missing: MULTICALL_DIR holds the multicall binary and its links" >&2
  exit 1
fi
command -v umoci >/dev/null || {
  echo "error: umoci is missing (apt-get install umoci)" >&2
  exit 1
}
version=${CNI_RS_VERSION:-$(suite_version)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) echo "error: no image architecture for $(uname -m)" >&2; exit 1 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
install -d -m 0755 "$root/bin"
install -m 0755 "$src/cni-rs" "$root/bin/cni-rs"
for p in $("$src/cni-rs" --list); do
  ln -s cni-rs "$root/bin/$p"
done
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
  --mtime="@$SOURCE_DATE_EPOCH" -C "$root" -cf "$work/layer.tar" .

layout=$work/layout
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci raw add-layer --image "$layout:$version" \
  --history.created "$created" --history.created_by "scripts/image.sh: /bin/cni-rs and its links" \
  "$work/layer.tar"
umoci config --image "$layout:$version" --no-history \
  --created "$created" --os linux --architecture "$arch" \
  --config.entrypoint /bin/cni-rs --config.workingdir / \
  --config.label "org.opencontainers.image.title=cni-rs" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --config.label "org.opencontainers.image.description=The CNI plugins in Rust, static, with the installer and the node command"
# Each change above wrote a new manifest and config; only the last are
# the image's.
umoci gc --layout "$layout"
find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
  --mtime="@$SOURCE_DATE_EPOCH" -C "$layout" -cf "$out" .
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' \
  "$layout/index.json"
