#!/usr/bin/env bash
# image/build/image.sh [OUT] (make image): the coordinator's VM image in OUT (default dist/image):
#   vmlinuz          the pinned Debian kernel, as shipped
#   initrd.cpio.zst  the one initramfs (image/build/initrd.sh) with dist/umbra-coordinator (make build)
#   cmdline.txt      image/cmdline, without its final newline (QEMU -append "$(cat cmdline.txt)")
#   OVMF.fd          the AmdSev firmware, when `make firmware` has built it for this lock (cached)
#   SHA256SUMS       of the files above
#   measurements.json  expected launch measurement per VM shape (image/build/measure.sh)
# Inputs are checked against image/inputs.lock first (image/build/fetch.sh). No root disk.
. "$(dirname "$0")/lib.sh"

out=${1:-$REPO_DIR/dist/image}
binary=${UMBRA_IMAGE_BINARY:-$REPO_DIR/dist/umbra-coordinator}
started=$(date +%s)
"$IMAGE_DIR/build/fetch.sh"
mkdir -p "$out"
rm -f "$out/SHA256SUMS" "$out/measurements.json"

kernel=$(lock_rows file | awk '$3 ~ /^boot\/vmlinuz-/ { print $2 "/" $3 }')
[ -n "$kernel" ] || die "image/inputs.lock has no boot/vmlinuz-* file row"
install -m 0644 "$CACHE/root/$kernel" "$out/vmlinuz"
"$IMAGE_DIR/build/initrd.sh" "$binary" "$out/initrd.cpio.zst"
printf '%s' "$(cat "$IMAGE_DIR/cmdline")" >"$out/cmdline.txt"
if UMBRA_OVMF_CACHED_ONLY=1 "$IMAGE_DIR/build/ovmf.sh" "$out/OVMF.fd"; then :; else
  rm -f "$out/OVMF.fd"
  say "no OVMF.fd in $out: run 'make firmware' (about 5 minutes) for the firmware and the measurements"
fi
(cd "$out" && sha256sum $(ls OVMF.fd vmlinuz initrd.cpio.zst cmdline.txt 2>/dev/null) >SHA256SUMS)
say "built $out in $(($(date +%s) - started)) s:"
sed 's/^/  /' "$out/SHA256SUMS" >&2
"$IMAGE_DIR/build/measure.sh" "$out"
