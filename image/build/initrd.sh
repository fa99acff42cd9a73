#!/usr/bin/env bash
# image/build/initrd.sh BINARY OUT: the image's one initramfs, a reproducible newc cpio compressed with
# zstd: /init and its /etc files (image/rootfs), busybox and the applet links /init uses, the glibc files
# the Bun binary needs, the kernel modules (decompressed with xz -d, loaded by /init with insmod) and
# BINARY as /app/umbra-coordinator. Inputs come from the checked cache of image/build/fetch.sh.
# Reproducible: entries sorted (LC_ALL=C), modes set here, mtimes 0, owners 0:0, cpio --reproducible (no
# inode or device numbers), zstd -T1 at a fixed level. The same inputs give the same bytes in any folder.
. "$(dirname "$0")/lib.sh"

binary=${1:?usage: initrd.sh BINARY OUT}
out=${2:?usage: initrd.sh BINARY OUT}
[ -x "$binary" ] || die "$binary: no coordinator binary (make build)"
need cpio cpio
need zstd zstd
need xz xz-utils

# The applets /init and the udhcpc script call; nothing else is linked (no getty, login, telnetd).
APPLETS="sh cat echo grep insmod ip mkdir mount printf setpriv sleep start-stop-daemon tr udhcpc"
ZSTD_LEVEL=12

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
umask 022
mkdir -p "$tree"/{app,bin,dev,etc,lib/modules,lib/x86_64-linux-gnu,lib64,proc,run,sys,tmp,var/lib/umbra}

install -m 0755 "$IMAGE_DIR/rootfs/init" "$tree/init"
install -m 0644 "$IMAGE_DIR/rootfs/etc/passwd" "$IMAGE_DIR/rootfs/etc/group" "$tree/etc/"
install -m 0755 "$IMAGE_DIR/rootfs/etc/udhcpc.script" "$tree/etc/udhcpc.script"

while read -r _ pkg path _ _; do
  case "$path" in
  bin/busybox) install -m 0755 "$CACHE/root/$pkg/$path" "$tree/bin/busybox" ;;
  boot/vmlinuz-*) ;;
  *) die "image/inputs.lock: no place in the initramfs for file row $path" ;;
  esac
done < <(lock_rows file)
for applet in $APPLETS; do ln -s busybox "$tree/bin/$applet"; done

while read -r _ pkg path _ _; do
  mode=0644
  case "$path" in */ld-linux-*.so.* | */libc.so.*) mode=0755 ;; esac
  install -m "$mode" "$CACHE/root/$pkg/$path" "$tree/lib/x86_64-linux-gnu/$(basename "$path")"
done < <(lock_rows lib)
ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$tree/lib64/ld-linux-x86-64.so.2"

: >"$tree/etc/modules"
while read -r _ pkg path _ _; do
  name=$(basename "$path" .ko.xz)
  xz -dc "$CACHE/root/$pkg/$path" >"$tree/lib/modules/$name.ko"
  chmod 0644 "$tree/lib/modules/$name.ko"
  echo "$name" >>"$tree/etc/modules"
done < <(lock_rows module)
chmod 0644 "$tree/etc/modules"

install -m 0755 "$binary" "$tree/app/umbra-coordinator"
chmod 1777 "$tree/tmp"
chmod 0755 "$tree"

find "$tree" -exec touch -h -d @0 {} +
mkdir -p "$(dirname "$out")"
(cd "$tree" && find . -print0 | LC_ALL=C sort -z |
  cpio --null --create --format=newc --owner=+0:+0 --reproducible --quiet) |
  zstd -q -T1 "-$ZSTD_LEVEL" -o "$out.part" -f
mv "$out.part" "$out"
say "initrd $(basename "$out"): $(stat -c %s "$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1)"
