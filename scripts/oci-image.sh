#!/usr/bin/env bash
# oci-image.sh ROOTFS OUT.tar NAME [CMD...]: an OCI image archive (an image layout in a tar,
# as `ctr images import` and `podman load` read it) holding ROOTFS as its single layer,
# built offline with tar, gzip, sha256sum and jq.
#   ROOTFS   directory with the image's root filesystem
#   OUT.tar  the archive to write
#   NAME     the tag in index.json (org.opencontainers.image.ref.name), e.g. "latest";
#            import with `ctr images import --base-name REPO OUT.tar` -> REPO:NAME
#   CMD      the image config's Cmd (default /bin/sh)
# Layer and archive are reproducible: sorted names, fixed mtimes and owners, gzip -n.
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rootfs=$1 out=$2 name=$3
shift 3
[[ $# -gt 0 ]] || set -- /bin/sh
[[ -d $rootfs ]] || { echo "oci-image: $rootfs is not a directory" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/oci-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
blobs=$work/layout/blobs/sha256
mkdir -p "$blobs"

# put_blob FILE: moves FILE into blobs/ under its digest; prints "DIGEST SIZE".
put_blob() {
	local digest size
	digest=$(sha256sum "$1" | cut -d' ' -f1)
	size=$(stat -c %s "$1")
	mv -f "$1" "$blobs/$digest"
	echo "$digest $size"
}

# shellcheck disable=SC2054 # the commas belong to --pax-option's value
tar_flags=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix
	--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)

# The layer: diff_id is the digest of the uncompressed tar, the descriptor's of the gzip.
tar -C "$rootfs" "${tar_flags[@]}" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
rm -f "$work/layer.tar"
read -r layer_digest layer_size < <(put_blob "$work/layer.tar.gz")

jq -n -c --arg diff "sha256:$diff_id" '{
	architecture: "amd64", os: "linux",
	config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
		Cmd: $ARGS.positional, WorkingDir: "/"},
	rootfs: {type: "layers", diff_ids: [$diff]},
	history: [{created_by: "forkbox scripts/oci-image.sh"}]
}' --args -- "$@" >"$work/config.json"
read -r config_digest config_size < <(put_blob "$work/config.json")

jq -n -c --arg cd "sha256:$config_digest" --argjson cs "$config_size" \
	--arg ld "sha256:$layer_digest" --argjson ls "$layer_size" '{
	schemaVersion: 2,
	mediaType: "application/vnd.oci.image.manifest.v1+json",
	config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
	layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $ld, size: $ls}]
}' >"$work/manifest.json"
read -r manifest_digest manifest_size < <(put_blob "$work/manifest.json")

jq -n -c --arg md "sha256:$manifest_digest" --argjson ms "$manifest_size" --arg name "$name" '{
	schemaVersion: 2,
	mediaType: "application/vnd.oci.image.index.v1+json",
	manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $md, size: $ms,
		platform: {architecture: "amd64", os: "linux"},
		annotations: {"org.opencontainers.image.ref.name": $name}}]
}' >"$work/layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"

tar -C "$work/layout" "${tar_flags[@]}" -cf "$out.tmp" oci-layout index.json blobs
mv -f "$out.tmp" "$out"
