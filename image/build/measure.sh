#!/usr/bin/env bash
# image/build/measure.sh DIR: DIR/measurements.json, the expected SEV-SNP launch measurement of DIR's
# OVMF.fd, vmlinuz, initrd.cpio.zst and cmdline.txt for every VM shape of image/shapes.json, computed by
# `umbra-coordinator measure` (attestation/cvm/snp-measure.ts, written from virtee/sev-snp-measure's algorithm), then
# compared with the committed image/measurements.json: a difference is printed as a diff (a changed
# image must be committed with its new measurements). Skips, saying why, when DIR has no OVMF.fd or the
# binary has no `measure` verb. UMBRA_MEASURE_STRICT=1 turns a difference into a failure (CI).
. "$(dirname "$0")/lib.sh"

dir=${1:?usage: measure.sh DIR}
coordinator=${UMBRA_IMAGE_BINARY:-$REPO_DIR/dist/umbra-coordinator}
if [ ! -f "$dir/OVMF.fd" ]; then
  say "measurements skipped: $dir has no OVMF.fd (make firmware)"
  exit 0
fi
probe=$("$coordinator" measure --help 2>&1 || true)
if [[ "$probe" == *"unknown command 'measure'"* ]]; then
  say "measurements skipped: $coordinator has no 'measure' verb yet (umbra-coordinator measure, issue 19 point 1)"
  exit 0
fi
"$coordinator" measure --firmware "$dir/OVMF.fd" --kernel "$dir/vmlinuz" --initrd "$dir/initrd.cpio.zst" \
  --cmdline "@$dir/cmdline.txt" --shapes "$IMAGE_DIR/shapes.json" --out "$dir/measurements.json.part" ||
  die "umbra-coordinator measure failed"
mv "$dir/measurements.json.part" "$dir/measurements.json"
committed="$IMAGE_DIR/measurements.json"
if [ -f "$committed" ] && cmp -s "$committed" "$dir/measurements.json"; then
  say "measurements.json matches the committed image/measurements.json"
  exit 0
fi
say "measurements.json differs from the committed image/measurements.json:"
[ -f "$committed" ] || committed=/dev/null
diff -u "$committed" "$dir/measurements.json" >&2 || true
say "if the change is intended: cp $dir/measurements.json image/measurements.json and commit it with its cause"
[ "${UMBRA_MEASURE_STRICT:-0}" = 1 ] && die "measurement changed (UMBRA_MEASURE_STRICT=1)"
exit 0
