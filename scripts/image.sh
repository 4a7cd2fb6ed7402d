#!/usr/bin/env bash
# Builds baton's image without a registry or a Docker engine: the two binaries compiled
# statically (glibc's static libraries, so the image needs no library; name lookups through
# /etc/hosts and DNS work without NSS modules), laid out with the CA bundle and an /etc/passwd
# entry for 65532, then image/Containerfile built by buildah (daemonless; podman or docker when
# buildah is missing). Writes, under target/image/:
#   baton-<version>.tar     the image as an OCI archive (`ctr images import` reads it)
#   image.json              its name, digest, size and what it holds
#   sbom.cdx.json           the CycloneDX SBOM of both binaries' dependencies (cargo-cyclonedx)
# Usage: scripts/image.sh [--print-archive]
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="baton-controller"))')
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
name="baton:${version}"
out=target/image
triple=x86_64-unknown-linux-gnu
mkdir -p "$out"

# Its own target folder: the static flag would otherwise rebuild the workspace's artifacts.
CARGO_TARGET_DIR="$out/cargo" RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --quiet --target "$triple" -p baton-controller -p baton-webhook

context="$out/context"
rm -rf "$context"
mkdir -p "$context/rootfs/usr/local/bin" "$context/rootfs/etc/ssl/certs"
for binary in baton-controller baton-webhook; do
  install -m 0755 "$out/cargo/$triple/release/$binary" "$context/rootfs/usr/local/bin/$binary"
done
# Prometheus and hook endpoints with public certificates are verified against Debian's bundle.
if [[ ! -s /etc/ssl/certs/ca-certificates.crt ]]; then
  echo "image.sh: /etc/ssl/certs/ca-certificates.crt is missing (Debian's ca-certificates)" >&2
  exit 1
fi
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$context/rootfs/etc/ssl/certs/"
printf 'baton:x:65532:65532:baton:/nonexistent:/nonexistent\n' >"$context/rootfs/etc/passwd"
printf 'baton:x:65532:\n' >"$context/rootfs/etc/group"
cp image/Containerfile "$context/Containerfile"

archive="$out/baton-${version}.tar"
rm -f "$archive"
build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision")
if command -v buildah >/dev/null; then
  # A storage of its own under target/: nothing of the machine's is touched, vfs needs no
  # overlay support, chroot isolation no user namespaces (the build runs no command anyway).
  storage=(--storage-driver vfs --root "$PWD/$out/storage" --runroot "$PWD/$out/run")
  buildah "${storage[@]}" bud --quiet --isolation chroot --timestamp 0 --layers=false \
    "${build_args[@]}" -f "$context/Containerfile" -t "$name" "$context" >/dev/null
  # Named as a container runtime normalizes `baton:<version>` (what deploy/ says), so that
  # `ctr images import` files it where the kubelet looks, by tag and by digest.
  buildah "${storage[@]}" push --quiet "$name" "oci-archive:$archive:docker.io/library/$name"
  buildah "${storage[@]}" rmi --all >/dev/null
elif command -v podman >/dev/null; then
  podman build --quiet --timestamp 0 "${build_args[@]}" -f "$context/Containerfile" -t "$name" "$context" >/dev/null
  podman save --format oci-archive -o "$archive" "$name"
elif command -v docker >/dev/null; then
  docker build --quiet "${build_args[@]}" -f "$context/Containerfile" -t "$name" "$context" >/dev/null
  docker save -o "$archive" "$name"
else
  echo "image.sh: no image builder: install buildah (Debian: apt-get install buildah), podman or docker" >&2
  exit 1
fi

# The SBOM: what each binary was built from, from Cargo.lock.
if ! cargo cyclonedx --version 2>/dev/null | grep -q ' 0.5.9$'; then
  cargo install cargo-cyclonedx@0.5.9 --locked --quiet
fi
# cargo-cyclonedx writes one sbom.json beside each workspace member's Cargo.toml; the two
# binaries' are merged below and every one removed.
members=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json,os,sys; print("\n".join(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"]))')
remove_member_sboms() { for member in $members; do rm -f "$member/sbom.json"; done; }
trap remove_member_sboms EXIT
cargo cyclonedx --format json --spec-version 1.5 --override-filename sbom --no-build-deps \
  --target "$triple" -q
python3 - "$out/sbom.cdx.json" controller/sbom.json webhook/sbom.json <<'PY'
import json, sys
out, *parts = sys.argv[1:]
merged = None
for part in parts:
    doc = json.load(open(part))
    binary = doc["metadata"]["component"]
    if merged is None:
        merged = doc
        seen = {c.get("bom-ref") for c in doc.get("components", [])}
        merged["metadata"]["component"] = {"type": "container", "name": "baton", "bom-ref": "baton-image"}
        merged["components"].append(binary)
        continue
    merged["components"].append(binary)
    for component in doc.get("components", []):
        if component.get("bom-ref") not in seen:
            seen.add(component.get("bom-ref"))
            merged["components"].append(component)
json.dump(merged, open(out, "w"), indent=1)
PY

python3 - "$archive" "$name" "$out/image.json" <<'PY'
import hashlib, json, os, sys, tarfile
archive, name, out = sys.argv[1:]
with tarfile.open(archive) as tar:
    index = json.load(tar.extractfile("index.json"))
    manifest_digest = index["manifests"][0]["digest"]
    blob = lambda digest: tar.extractfile("blobs/sha256/" + digest.split(":")[1]).read()
    manifest = json.loads(blob(manifest_digest))
    config = json.loads(blob(manifest["config"]["digest"]))
    files = []
    for layer in manifest["layers"]:
        import io
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as layer_tar:
            files += [m.name.lstrip("./") for m in layer_tar.getmembers() if not m.isdir()]
json.dump({
    "name": name,
    "digest": manifest_digest,
    "archive_bytes": os.path.getsize(archive),
    "layers_bytes": sum(layer["size"] for layer in manifest["layers"]),
    "user": config["config"].get("User"),
    "files": sorted(files),
}, open(out, "w"), indent=1)
PY
if [[ "${1:-}" == --print-archive ]]; then
  echo "$PWD/$archive"
else
  echo "image.sh: $name $(python3 -c 'import json; d=json.load(open("'"$out"'/image.json")); print(d["digest"], d["layers_bytes"], "bytes")') -> $archive" >&2
fi
