#!/usr/bin/env bash
# Writes the suite's container image, FROM scratch, as an OCI image archive
# whose tag names one image index with a manifest per architecture
# (scripts/release.sh calls it with its multicall stages):
#
#   scripts/image.sh OUT_TAR ARCH=MULTICALL_DIR[:DOC_DIR] [ARCH=...]
#
# ARCH is a release architecture (scripts/arch.sh: amd64, arm64, arm,
# ppc64le, s390x, riscv64, mips64le). MULTICALL_DIR holds that
# architecture's static multicall binary cni-rs and a link to it per
# plugin (the multicall tarball's files); the binary and the links go to
# /bin of the image's one layer (no shell, no libc, no other program). The entry point is
# /bin/cni-rs, so a container's args choose what it does
# (deploy/cni-rs.yaml: `install /host/opt/cni/bin`, then `gc --apply
# --every 10m`). DOC_DIR's files (release.sh's: LICENSE,
# THIRD-PARTY-NOTICES and cni-rs.spdx.json, the SBOM of the binary) go to
# /usr/share/doc/cni-rs.
#
# The image index and each manifest carry the OCI annotations
# org.opencontainers.image.{title,description,version,licenses,created},
# created being SOURCE_DATE_EPOCH, and revision (CNI_RS_REVISION, default
# the checkout's commit) and source (CNI_RS_SOURCE_URL, default the git
# remote origin's URL when it is one) when known: a build from the source
# release, outside git, has neither unless they are given. The configs
# carry the same as labels. OUT_TAR is the OCI image layout (index.json, oci-layout,
# blobs/) as a tar; its index.json has one entry, tagged with the suite's
# version, which is the image index: a runtime pulls the manifest of its
# node's platform (linux/arm/v7 for arm), and
#
#   ctr -n k8s.io images import --base-name localhost/cni-rs OUT_TAR
#   skopeo copy --all oci-archive:OUT_TAR:<version> docker://REGISTRY/cni-rs:<version>
#
# import it or push every platform. Each manifest is written with umoci
# (Debian's); the index that lists them is the OCI image-spec's JSON, which
# umoci does not write. Reproducible: each layer is a sorted tar of
# root-owned files dated SOURCE_DATE_EPOCH (default: the last commit's
# time), the configs and history carry that date, and the archive is sorted
# and dated the same: the same binaries give the same digests and the same
# bytes. Prints the image index's digest.
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/suite.sh"

if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_TAR ARCH=MULTICALL_DIR [ARCH=MULTICALL_DIR...]" >&2
  exit 2
fi
out=$1
shift
. "$repo/scripts/arch.sh"
for pair in "$@"; do
  arch=${pair%%=*} src=${pair#*=} src=${src%%:*}
  arch_oci "$arch" >/dev/null || exit 2
  if [ ! -f "$src/cni-rs" ] || [ ! -x "$src/cni-rs" ]; then
    echo "error: $src/cni-rs is missing: MULTICALL_DIR holds the multicall binary and its links" >&2
    exit 1
  fi
  if [ -z "$(find "$src" -maxdepth 1 -type l -lname cni-rs)" ]; then
    echo "error: $src has no link to cni-rs: MULTICALL_DIR holds a link per plugin" >&2
    exit 1
  fi
done
command -v umoci >/dev/null || {
  echo "error: umoci is missing (apt-get install umoci)" >&2
  exit 1
}
version=${CNI_RS_VERSION:-$(suite_version)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
revision=${CNI_RS_REVISION:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || true)}
source_url=${CNI_RS_SOURCE_URL:-$(git -C "$repo" remote get-url origin 2>/dev/null || true)}
case $source_url in
https://* | http://* | git@* | ssh://* | git://*) ;;
*) source_url= ;; # a local path is no place to get the source from
esac
annotations=(
  "org.opencontainers.image.title=cni-rs"
  "org.opencontainers.image.description=The CNI plugins in Rust, static, with the installer and the node command"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.licenses=Apache-2.0"
  "org.opencontainers.image.created=$created"
)
[ -z "$revision" ] || annotations+=("org.opencontainers.image.revision=$revision")
[ -z "$source_url" ] || annotations+=("org.opencontainers.image.source=$source_url")
labels=()
manifest_annotations=()
for a in "${annotations[@]}"; do
  labels+=(--config.label "$a")
  manifest_annotations+=(--manifest.annotation "$a")
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
layout=$work/layout
umoci init --layout "$layout"
platforms=()
for pair in "$@"; do
  arch=${pair%%=*} src=${pair#*=} doc=
  case $src in *:*) doc=${src#*:} src=${src%%:*} ;; esac
  oci=$(arch_oci "$arch")
  tag=$version-${oci//\//-}
  root=$work/root-$arch
  install -d -m 0755 "$root/bin"
  install -m 0755 "$src/cni-rs" "$root/bin/cni-rs"
  find "$src" -maxdepth 1 -type l -lname cni-rs -printf '%f\n' | while read -r p; do
    ln -s cni-rs "$root/bin/$p"
  done
  if [ -n "$doc" ]; then
    install -d -m 0755 "$root/usr/share/doc/cni-rs"
    install -m 0644 "$doc"/* "$root/usr/share/doc/cni-rs/"
  fi
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$root" -cf "$work/layer-$arch.tar" .
  umoci new --image "$layout:$tag"
  umoci raw add-layer --image "$layout:$tag" \
    --history.created "$created" --history.created_by "scripts/image.sh: /bin/cni-rs, its links and its documents" \
    "$work/layer-$arch.tar"
  umoci config --image "$layout:$tag" --no-history \
    --created "$created" --os linux --architecture "${oci%%/*}" \
    --config.entrypoint /bin/cni-rs --config.workingdir / "${labels[@]}" "${manifest_annotations[@]}"
  platforms+=("$tag=$oci")
done
# Each change above wrote a new manifest and config; only the last are
# the image's.
umoci gc --layout "$layout"
# The image index: the platforms' manifests, in the order given, under the
# version's tag; their own tags go.
python3 - "$layout" "$version" "$(printf '%s\n' "${annotations[@]}")" "${platforms[@]}" <<'PY'
import hashlib, json, os, sys
layout, version, annotations, pairs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
top = json.load(open(os.path.join(layout, "index.json")))
by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in top["manifests"]}
manifests = []
for pair in pairs:
    tag, platform = pair.split("=", 1)
    desc = by_tag[tag]
    arch, _, variant = platform.partition("/")
    p = {"architecture": arch, "os": "linux"}
    if variant:
        p["variant"] = variant
    manifests.append({"mediaType": desc["mediaType"], "digest": desc["digest"],
                      "size": desc["size"], "platform": p})
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": manifests,
         "annotations": dict(a.split("=", 1) for a in annotations.splitlines())}
blob = json.dumps(index, separators=(",", ":"), sort_keys=True).encode()
digest = hashlib.sha256(blob).hexdigest()
with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
    f.write(blob)
top["manifests"] = [{"mediaType": index["mediaType"], "digest": "sha256:" + digest,
                     "size": len(blob),
                     "annotations": {"org.opencontainers.image.ref.name": version}}]
with open(os.path.join(layout, "index.json"), "w") as f:
    json.dump(top, f, separators=(",", ":"), sort_keys=True)
PY
find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
  --mtime="@$SOURCE_DATE_EPOCH" -C "$layout" -cf "$out" .
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' \
  "$layout/index.json"
