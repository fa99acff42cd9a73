#!/usr/bin/env bash
# image/launch/qemu-snp.sh SHAPE [DIR] [-- EXTRA QEMU ARGS]: the operator's launch of the coordinator's
# image as an SEV-SNP guest, in one of the published VM shapes of image/shapes.json (vCPU count and CPU
# model are part of the launch measurement; guest_features come from the host kernel and must match the
# shape's). DIR (default dist/image) holds OVMF.fd, vmlinuz, initrd.cpio.zst and cmdline.txt as
# released (check them against SHA256SUMS first). QEMU hashes kernel, initrd and command line into the
# measured firmware page (kernel-hashes=on); any other -append or file changes the measurement and the
# auditors' check fails. Host: Linux >= 6.11 with KVM SEV-SNP, QEMU >= 9.1 (firmware with -bios, not
# pflash). Environment: VM_MEMORY (MiB, default 4096; not measured), VM_NETDEV (default user
# networking forwarding 127.0.0.1:8443 to the guest's 8080), VM_CBITPOS (default 51, Milan and Genoa).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shape=${1:?usage: qemu-snp.sh SHAPE [DIR] [-- QEMU ARGS]; shapes: see image/shapes.json}
shift
dir="$here/../../dist/image"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dir=$1; shift; fi
[ "${1:-}" = "--" ] && shift

# One shape per line in image/shapes.json: {"name": ..., "vcpus": N, "cpu": "...", "guest_features": "..."}.
line=$(grep "\"name\": \"$shape\"" "$here/../shapes.json") || { echo "no shape '$shape' in image/shapes.json" >&2; exit 2; }
vcpus=$(echo "$line" | sed -E 's/.*"vcpus": ([0-9]+).*/\1/')
cpu=$(echo "$line" | sed -E 's/.*"cpu": "([^"]+)".*/\1/')
policy=$(sed -nE 's/.*"policy": "([^"]+)".*/\1/p' "$here/../shapes.json")
for file in OVMF.fd vmlinuz initrd.cpio.zst cmdline.txt; do
  [ -f "$dir/$file" ] || { echo "$dir/$file is missing (make firmware image, or the release files)" >&2; exit 2; }
done
memory=${VM_MEMORY:-4096}
netdev=${VM_NETDEV:-user,id=n0,hostfwd=tcp:127.0.0.1:8443-:8080}

exec qemu-system-x86_64 \
  -enable-kvm -nodefaults -nographic -no-reboot \
  -machine q35,confidential-guest-support=sev0,memory-backend=ram1,vmport=off \
  -cpu "$cpu" -smp "$vcpus" -m "$memory" \
  -object "memory-backend-memfd,id=ram1,size=${memory}M,share=true,prealloc=false" \
  -object "sev-snp-guest,id=sev0,cbitpos=${VM_CBITPOS:-51},reduced-phys-bits=1,policy=$policy,kernel-hashes=on" \
  -bios "$dir/OVMF.fd" \
  -kernel "$dir/vmlinuz" -initrd "$dir/initrd.cpio.zst" -append "$(cat "$dir/cmdline.txt")" \
  -netdev "$netdev" -device virtio-net-pci,disable-legacy=on,iommu_platform=true,romfile=,netdev=n0 \
  -serial stdio \
  "$@"
