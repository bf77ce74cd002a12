#!/usr/bin/env python3
"""What a release artifact is made of: the crates its binaries link, their
licenses and notices, as the release ships them (scripts/release.sh).

    bom.py crates BINARY...            the linked crates, "name version" lines
    bom.py notices --about JSON BINARY... > THIRD-PARTY-NOTICES
    bom.py copyright --about JSON [--vendored] BINARY... > copyright (DEP-5)
    bom.py spdx --about JSON --artifact FILE [--purpose P] [--vendored]
                [--member PATH...] BINARY... > FILE.spdx.json

The crates come from the binaries themselves: cargo-auditable embeds each
binary's dependency tree in its `.dep-v0` section, which is what `cargo
audit bin`, Trivy and Grype read. A crate is linked when the binary's root
reaches it through runtime edges without passing a proc-macro (those run
in the compiler, and what only they use is never linked). `--vendored`
takes every crate of Cargo.lock instead: the source release holds them all.
Licenses, license texts and the chosen license of a choice come from
cargo-about's JSON (`cargo about generate --format json`, about.toml);
versions, authors and kinds from `cargo metadata`, checksums from
Cargo.lock. Output is sorted and dated SOURCE_DATE_EPOCH: the same inputs
give the same bytes.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tomllib
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = "cni-rs"
PROJECT_LICENSE = "Apache-2.0"
SUPPLIER = "Organization: the cni-rs developers"


def elf_section(path, wanted):
    """The bytes of section `wanted` of an ELF file of any class and byte order."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        sys.exit(f"error: {path} is not an ELF file")
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)

    def header(i):
        at = shoff + i * shentsize
        if is64:
            name, _, _, _, off, size = struct.unpack_from(end + "IIQQQQ", data, at)
        else:
            name, _, _, _, off, size = struct.unpack_from(end + "IIIIII", data, at)
        return name, off, size

    _, str_off, _ = header(shstrndx)
    for i in range(shnum):
        name, off, size = header(i)
        stop = data.index(b"\0", str_off + name)
        if data[str_off + name:stop].decode() == wanted:
            return data[off:off + size]
    return None


def embedded_tree(path):
    """cargo-auditable's dependency tree of one binary."""
    section = elf_section(path, ".dep-v0")
    if section is None:
        sys.exit(f"error: {path} has no .dep-v0 section: not built with cargo auditable")
    return json.loads(zlib.decompress(section))


class Workspace:
    """The workspace's packages (`cargo metadata`) and Cargo.lock's checksums."""

    def __init__(self):
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--offline"],
            cwd=REPO, check=True, capture_output=True, text=True).stdout)
        self.members = set(meta["workspace_members"])
        self.packages = {(p["name"], p["version"]): p for p in meta["packages"]}
        with open(os.path.join(REPO, "Cargo.lock"), "rb") as f:
            lock = tomllib.load(f)
        self.locked = lock["package"]
        self.checksums = {(p["name"], p["version"]): p["checksum"]
                          for p in self.locked if "checksum" in p}

    def package(self, name, version):
        p = self.packages.get((name, version))
        if p is None:
            sys.exit(f"error: {name} {version} is not in this workspace's Cargo.lock")
        return p

    def is_proc_macro(self, name, version):
        return any("proc-macro" in t["kind"] for t in self.package(name, version)["targets"])

    def is_ours(self, name, version):
        return self.package(name, version)["id"] in self.members


def linked_crates(ws, binaries):
    """(name, version) -> set of (name, version) it depends on, for every
    crate linked into any of `binaries`."""
    graph = {}
    for path in binaries:
        pkgs = embedded_tree(path)["packages"]
        roots = [i for i, p in enumerate(pkgs) if p.get("root")]
        if len(roots) != 1:
            sys.exit(f"error: {path}: {len(roots)} roots in its dependency tree")
        seen, todo = set(), roots
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            p = pkgs[i]
            deps = [d for d in p.get("dependencies", [])
                    if pkgs[d].get("kind", "runtime") == "runtime"
                    and not ws.is_proc_macro(pkgs[d]["name"], pkgs[d]["version"])]
            key = (p["name"], p["version"])
            graph.setdefault(key, set()).update((pkgs[d]["name"], pkgs[d]["version"]) for d in deps)
            todo.extend(deps)
    return graph


def locked_crates(ws):
    """Every crate of Cargo.lock, as the vendored source holds them."""
    graph = {}
    versions = {}
    for p in ws.locked:
        versions.setdefault(p["name"], []).append(p["version"])
    for p in ws.locked:
        deps = set()
        for d in p.get("dependencies", []):
            parts = d.split(" ")
            deps.add((parts[0], parts[1] if len(parts) > 1 else versions[parts[0]][0]))
        graph[(p["name"], p["version"])] = deps
    return graph


def third_party(ws, graph):
    return sorted(k for k in graph if not ws.is_ours(*k))


class About:
    """cargo-about's view: each crate's license expression, the license it
    is used under, and the texts."""

    def __init__(self, path):
        with open(path) as f:
            about = json.load(f)
        self.licenses = about["licenses"]
        self.chosen = {}
        for lic in self.licenses:
            for use in lic["used_by"]:
                c = use["crate"]
                self.chosen.setdefault((c["name"], c["version"]), set()).add(lic["id"])
        self.declared = {(c["package"]["name"], c["package"]["version"]): c["license"]
                         for c in about["crates"]}

    def concluded(self, key, required=True):
        """The license a crate is used under: cargo-about's for every crate a
        binary links. The source release also holds crates no shipped binary
        links (tests' and other platforms'): NOASSERTION for those."""
        ids = self.chosen.get(key)
        if not ids:
            if not required:
                return "NOASSERTION"
            sys.exit(f"error: cargo-about has no license text for {key[0]} {key[1]}: about.toml")
        return " AND ".join(sorted(ids))

    def texts_for(self, crates):
        """(license, [crates], text) for each license text the crates use."""
        wanted = set(crates)
        out = []
        for lic in self.licenses:
            users = sorted({(u["crate"]["name"], u["crate"]["version"]) for u in lic["used_by"]} & wanted)
            if users:
                out.append((lic, users))
        out.sort(key=lambda x: (x[0]["id"], x[1]))
        return out


def spdx_expression(expr):
    """Cargo's older `MIT/Apache-2.0` spelling as an SPDX expression."""
    return re.sub(r"\s*/\s*", " OR ", expr.strip())


def inputs(args):
    """The workspace, cargo-about's data and the crate graph the command
    describes: the binaries' linked crates, or with --vendored every
    crate of Cargo.lock."""
    ws = Workspace()
    about = About(args.about)
    graph = locked_crates(ws) if args.vendored else linked_crates(ws, args.binaries)
    return ws, about, graph


def notices(args):
    ws, about, graph = inputs(args)
    crates = third_party(ws, graph)
    w = sys.stdout.write
    w(f"Third-party notices for {PROJECT}\n\n")
    w(f"{PROJECT} is under the Apache License 2.0 (LICENSE). Its binaries are built\n"
      f"from, and statically link, the {len(crates)} crates below, each under the\n"
      "license shown (where a crate offers a choice, the one it is used under).\n"
      "Their licenses' texts, with the notices each crate ships, follow.\n\n")
    for key in crates:
        w(f"  {key[0]} {key[1]}: {about.concluded(key)}\n")
    for lic, users in about.texts_for(crates):
        w("\n" + "=" * 78 + "\n")
        w(f"{lic['name']} ({lic['id']})\n")
        w("Used by: " + ", ".join(f"{n} {v}" for n, v in users) + "\n")
        w("=" * 78 + "\n\n")
        w(lic["text"].rstrip() + "\n")


# A copyright notice: "Copyright (c) 2018 Name", "Copyright 2016 Name",
# "Copyright (c) The Rust Project Developers", "(c) 2020 Name"; not the
# license texts' own sentences that start with the word.
COPYRIGHT_LINE = re.compile(
    r"^(?:copyright\s*(?:\(c\)|©)?\s*\d{4}|copyright\s*(?:\(c\)|©)\s*\S|(?:\(c\)|©)\s*\d{4})",
    re.IGNORECASE)
# A template's blanks: "Copyright [yyyy] [name of copyright owner]".
PLACEHOLDER = re.compile(r"\[yyyy\]|<year>|<copyright holders?>|\[name of", re.IGNORECASE)


def copyright_lines(about, key):
    """The copyright lines of a crate's license files, else its authors."""
    lines = []
    for lic in about.licenses:
        if any((u["crate"]["name"], u["crate"]["version"]) == key for u in lic["used_by"]):
            for line in lic["text"].splitlines():
                line = line.strip()
                if COPYRIGHT_LINE.match(line) and not PLACEHOLDER.search(line):
                    lines.append(line)
    return sorted(set(lines))


def dep5_license(expr):
    return re.sub(r"\b(OR|AND|WITH)\b", lambda m: m.group(1).lower(), spdx_expression(expr))


def copyright_file(args):
    """Debian's machine-readable copyright (DEP-5) for the package."""
    ws, about, graph = inputs(args)
    crates = third_party(ws, graph)
    w = sys.stdout.write
    w("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
      f"Upstream-Name: {PROJECT}\n"
      "Comment: The binaries statically link the Rust crates listed below, from\n"
      " crates.io, at the versions given; their files are the crate's source\n"
      " (Cargo.lock names each version; the source release vendors them).\n"
      " Where a crate offers a choice of licenses, each is listed; THIRD-PARTY-NOTICES\n"
      " in this directory holds the texts they are used under.\n\n"
      "Files: *\nCopyright: the cni-rs developers\nLicense: Apache-2.0\n\n")
    used = {"Apache-2.0"}
    for key in crates:
        pkg = ws.package(*key)
        holders = copyright_lines(about, key) or [
            a.split("<")[0].strip() for a in pkg.get("authors", []) if a.split("<")[0].strip()
        ] or [f"the {key[0]} authors"]
        expr = spdx_expression(pkg["license"] or about.declared.get(key, ""))
        used.update(t for t in re.split(r"\s+|\(|\)", expr) if t and t not in ("OR", "AND", "WITH"))
        w(f"Files: vendor/{key[0]}-{key[1]}/*\n")
        w("Copyright: " + "\n ".join(holders) + "\n")
        w(f"License: {dep5_license(expr)}\n\n")
    texts = {}
    for lic in about.licenses:
        texts.setdefault(lic["id"], lic["text"])
    for name in sorted(used):
        w(f"License: {name}\n")
        if name == "Apache-2.0":
            w(" On Debian systems, the complete text of the Apache License, Version 2.0\n"
              " can be found in /usr/share/common-licenses/Apache-2.0.\n\n")
            continue
        text = texts.get(name)
        if text is None:
            w(" The text of this license exception or license is in THIRD-PARTY-NOTICES.\n\n")
            continue
        for line in text.rstrip().splitlines():
            w(" " + (line.rstrip() if line.strip() else ".") + "\n")
        w("\n")


def digest(path, algo):
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def spdx_id(kind, name, version=""):
    return re.sub(r"[^A-Za-z0-9.-]", "-", f"SPDXRef-{kind}-{name}" + (f"-{version}" if version else ""))


def spdx(args):
    ws, about, graph = inputs(args)
    artifact = os.path.basename(args.artifact)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    version = ws.package("libcni", next(v for n, v in ws.packages if n == "libcni"))["version"]
    sha256 = digest(args.artifact, "sha256")
    art_id = "SPDXRef-Artifact"
    packages = [{
        "SPDXID": art_id,
        "name": artifact,
        "versionInfo": version,
        "supplier": SUPPLIER,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "checksums": [{"algorithm": "SHA256", "checksumValue": sha256},
                      {"algorithm": "SHA512", "checksumValue": digest(args.artifact, "sha512")}],
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": PROJECT_LICENSE,
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": args.purpose,
    }]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": art_id}]
    crate_id = {}
    for key in sorted(graph):
        name, ver = key
        pkg = ws.package(name, ver)
        ours = ws.is_ours(name, ver)
        crate_id[key] = spdx_id("Crate", name, ver)
        entry = {
            "SPDXID": crate_id[key],
            "name": name,
            "versionInfo": ver,
            "supplier": SUPPLIER if ours else "Organization: crates.io",
            "filesAnalyzed": False,
            "licenseDeclared": spdx_expression(pkg["license"] or "NOASSERTION"),
            "licenseConcluded": PROJECT_LICENSE if ours else about.concluded(key, not args.vendored),
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "LIBRARY",
        }
        if ours:
            # Not on crates.io: its source is this release's.
            entry["downloadLocation"] = "NOASSERTION"
            entry["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                      "referenceLocator": f"pkg:generic/{PROJECT}/{name}@{ver}"}]
            entry["sourceInfo"] = f"a crate of {PROJECT} {version}, in its source release"
        else:
            entry["downloadLocation"] = f"https://crates.io/api/v1/crates/{name}/{ver}/download"
            entry["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                      "referenceLocator": f"pkg:cargo/{name}@{ver}"}]
            entry["checksums"] = [{"algorithm": "SHA256", "checksumValue": ws.checksums[key]}]
        packages.append(entry)
    # What the artifact holds: its binaries (each statically linking its
    # crates), or for the source release the crates themselves.
    if args.vendored:
        for key in sorted(graph):
            relationships.append({"spdxElementId": art_id, "relationshipType": "CONTAINS",
                                  "relatedSpdxElement": crate_id[key]})
    for path, member in zip(args.binaries, args.member or []):
        bin_id = spdx_id("Binary", member)
        packages.append({
            "SPDXID": bin_id,
            "name": member,
            "versionInfo": version,
            "supplier": SUPPLIER,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "checksums": [{"algorithm": "SHA256", "checksumValue": digest(path, "sha256")}],
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": PROJECT_LICENSE,
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "APPLICATION",
        })
        relationships.append({"spdxElementId": art_id, "relationshipType": "CONTAINS",
                              "relatedSpdxElement": bin_id})
        for key in sorted(linked_crates(ws, [path])):
            relationships.append({"spdxElementId": bin_id, "relationshipType": "STATIC_LINK",
                                  "relatedSpdxElement": crate_id[key]})
    for key in sorted(graph):
        for dep in sorted(graph[key]):
            if dep in crate_id:
                relationships.append({"spdxElementId": crate_id[key], "relationshipType": "DEPENDS_ON",
                                      "relatedSpdxElement": crate_id[dep]})
    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": artifact,
        # Unique per artifact (its digest), and the same for the same bytes.
        "documentNamespace": f"https://spdx.org/spdxdocs/{artifact}-{sha256}",
        "creationInfo": {"created": created,
                         "creators": ["Tool: cni-rs-scripts-bom.py", SUPPLIER]},
        "documentDescribes": [art_id],
        "packages": packages,
        "relationships": relationships,
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def crates(args):
    ws = Workspace()
    for name, version in sorted(linked_crates(ws, args.binaries)):
        print(name, version)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("crates")
    p.add_argument("binaries", nargs="+")
    p.set_defaults(run=crates)
    for name, run in (("notices", notices), ("copyright", copyright_file), ("spdx", spdx)):
        p = sub.add_parser(name)
        p.add_argument("--about", required=True, help="cargo-about's JSON")
        p.add_argument("--vendored", action="store_true", help="every crate of Cargo.lock")
        p.add_argument("binaries", nargs="*")
        p.set_defaults(run=run)
        if name == "spdx":
            p.add_argument("--artifact", required=True)
            p.add_argument("--purpose", default="ARCHIVE")
            p.add_argument("--member", action="append",
                           help="each binary's path inside the artifact, in order")
    args = parser.parse_args()
    if not args.binaries and not getattr(args, "vendored", False):
        parser.error("no binaries")
    if getattr(args, "member", None) and len(args.member) != len(args.binaries):
        parser.error("one --member per binary")
    args.run(args)


if __name__ == "__main__":
    main()
