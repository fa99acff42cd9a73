#!/usr/bin/env bash
# image/build/ovmf.sh OUT: the AmdSev OVMF (OvmfPkg/AmdSev/AmdSevX64.dsc, stateless, with the
# SNP_KERNEL_HASHES section QEMU's kernel-hashes=on fills) built from Debian's edk2 source package of
# image/inputs.lock, copied to OUT. Debian ships no AmdSev build.
#
# The build runs at one fixed path, OVMF_BUILD_DIR below: edk2 embeds build paths, and a build elsewhere
# differs (64 bytes of HiiDatabase.efi). Two builds at that path give identical bytes. The result is
# cached under $CACHE/ovmf/<key>, key = SHA-256 over the source digests, the recipe version and the path; a
# cached OVMF.fd is reused, so `make image` rebuilds it only when one of those changes.
. "$(dirname "$0")/lib.sh"

out=${1:?usage: ovmf.sh OUT}
OVMF_BUILD_DIR=/var/tmp/umbra-ovmf/edk2
orig=$(lock_rows src | awk '$3 ~ /\.orig\.tar\./ { print $3 }')
debian=$(lock_rows src | awk '$3 ~ /\.debian\.tar\./ { print $3 }')
[ -n "$orig" ] && [ -n "$debian" ] || die "image/inputs.lock needs the edk2 .orig and .debian tarballs (src rows)"
# Bump OVMF_RECIPE when the build steps below change what they produce.
OVMF_RECIPE=1
key=$( { lock_rows src; echo "recipe $OVMF_RECIPE $OVMF_BUILD_DIR"; } | sha256sum | cut -d' ' -f1)
cached="$CACHE/ovmf/$key/OVMF.fd"

if [ "${UMBRA_OVMF_CACHED_ONLY:-0}" = 1 ] && [ ! -f "$cached" ]; then
  say "no cached AmdSev OVMF for this source ($cached): firmware not built (UMBRA_OVMF_CACHED_ONLY=1)"
  exit 3
fi
if [ ! -f "$cached" ]; then
  need nasm nasm
  need iasl acpica-tools
  [ -f /usr/include/uuid/uuid.h ] || need_packages uuid-dev
  need gcc gcc
  need make make
  need patch patch
  need python3 python3
  "$(dirname "$0")/fetch.sh" --sources
  started=$(date +%s)
  say "building the AmdSev OVMF at $OVMF_BUILD_DIR (about 5 minutes on 2 cores)"
  rm -rf "$OVMF_BUILD_DIR"
  mkdir -p "$OVMF_BUILD_DIR"
  tar -xJf "$CACHE/src/$orig" -C "$OVMF_BUILD_DIR" --strip-components=1
  tar -xJf "$CACHE/src/$debian" -C "$OVMF_BUILD_DIR"
  (
    cd "$OVMF_BUILD_DIR"
    export LC_ALL=C TZ=UTC SOURCE_DATE_EPOCH=0
    # Debian's patches, in series order (comments and blank lines skipped).
    grep -Ev '^[[:space:]]*(#|$)' debian/patches/series | while read -r p _; do
      patch -s -p1 -i "debian/patches/$p" || exit 1
    done
    # An empty grub.efi: otherwise Grub/grub.sh runs grub-mkimage with the sevsecret module, which
    # bookworm's grub lacks. We boot with -kernel; the firmware's grub is never used.
    touch OvmfPkg/AmdSev/Grub/grub.efi
    make -s -C BaseTools -j "$(nproc)" >build-basetools.log 2>&1 || { tail -40 build-basetools.log >&2; exit 1; }
    # edksetup.sh reads unset variables (sourced without -u) and this script's arguments (cleared).
    set +u --
    export PYTHON_COMMAND=python3
    # shellcheck disable=SC1091
    . ./edksetup.sh >/dev/null
    set -u
    build -q -n "$(nproc)" -a X64 -t GCC5 -b RELEASE -p OvmfPkg/AmdSev/AmdSevX64.dsc >build.log 2>&1 ||
      { tail -40 build.log >&2; exit 1; }
  ) || die "the OVMF build failed (log in $OVMF_BUILD_DIR)"
  mkdir -p "$(dirname "$cached")"
  cp "$OVMF_BUILD_DIR/Build/AmdSev/RELEASE_GCC5/FV/OVMF.fd" "$cached.part"
  mv "$cached.part" "$cached"
  say "OVMF built in $(($(date +%s) - started)) s: $(sha256sum "$cached" | cut -d' ' -f1)"
fi
mkdir -p "$(dirname "$out")"
cp "$cached" "$out"
say "OVMF.fd $(sha256sum "$out" | cut -d' ' -f1) (cache $cached)"
