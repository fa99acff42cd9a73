#!/usr/bin/env bash
# image/launch/qemu-smoke.sh [DIR]: the image's boot test without SEV (make image-smoke). Boots DIR's
# vmlinuz and initrd.cpio.zst (default dist/image) under QEMU with software emulation (TCG), stock
# firmware (QEMU's SeaBIOS, or Debian's stock OVMF: the AmdSev OVMF refuses -kernel without SEV), one vCPU, and user networking restricted to one forwarded loopback port. Checks:
#   1. GET /healthz answers 200 through the forwarded port;
#   2. GET /v1/attestation answers 503 service_unavailable with its reason (no SEV-SNP here);
#   3. the console's socket list (printed by /init once the coordinator listens) holds only the
#      coordinator's port, and the coordinator (PID 1 after /init's exec) runs as uid 1000 with no new
#      privileges;
#   4. no shell answers on the console: a command typed there after boot is never evaluated, and no
#      prompt or login appears.
# The command line is DIR/cmdline.txt plus, for this boot only, umbra.ip for QEMU's user network; the
# coordinator serves https (self-signed, its key born in the VM) and awaits provisioning (no secret here). Bounded: SMOKE_TIMEOUT seconds (default 300) for the whole boot; QEMU ends by its pid.
set -euo pipefail
. "$(dirname "$0")/../build/lib.sh"

dir=${1:-$REPO_DIR/dist/image}
limit=${SMOKE_TIMEOUT:-300}
[ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd.cpio.zst" ] && [ -f "$dir/cmdline.txt" ] ||
  die "$dir has no vmlinuz, initrd.cpio.zst and cmdline.txt (make image)"
need_qemu
need curl curl
# SMOKE_FIRMWARE=seabios (default) or ovmf (Debian's stock OVMF.fd); SMOKE_CPU (default EPYC-Milan,
# a CPU model of the published shapes; TCG emulates what Bun needs and warns about the rest).
cpu=${SMOKE_CPU:-EPYC-Milan}
firmware=()
firmware_name="SeaBIOS (QEMU's default)"
if [ "${SMOKE_FIRMWARE:-seabios}" = ovmf ]; then
  [ -f /usr/share/ovmf/OVMF.fd ] || need_packages ovmf
  firmware=(-bios /usr/share/ovmf/OVMF.fd)
  firmware_name="stock OVMF (/usr/share/ovmf/OVMF.fd)"
fi

work=$(mktemp -d)
qemu_pid=""
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  exec 3>&- 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
console="$work/console.log"
failed() {
  echo "smoke: FAIL: $*" >&2
  echo "smoke: last console lines:" >&2
  tail -40 "$console" | sed 's/^/  | /' >&2
  exit 1
}

# The image serves https (self-signed, key born in the VM) and awaits provisioning: no secret on this line.
cmdline="$(cat "$dir/cmdline.txt") umbra.ip=10.0.2.15/24,10.0.2.2"
# The serial console's input is a FIFO kept open here (fd 3): what we write there is typed on ttyS0.
mkfifo "$work/in"
exec 3<>"$work/in"

started=$(date +%s)
for attempt in 1 2 3; do
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  timeout --signal=KILL "$limit" qemu-system-x86_64 -accel tcg -machine q35 -cpu "$cpu" -smp 1 -m 2048 \
    "${firmware[@]}" -display none -monitor none -serial stdio -no-reboot \
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd.cpio.zst" -append "$cmdline" \
    -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:8080" -device virtio-net-pci,netdev=n0 \
    <"$work/in" >"$console" 2>"$work/qemu.err" &
  qemu_pid=$!
  echo "smoke: QEMU pid $qemu_pid, TCG, $cpu, 1 vCPU, $firmware_name, 127.0.0.1:$port -> guest :8080"
  healthy=0
  while kill -0 "$qemu_pid" 2>/dev/null && [ $(($(date +%s) - started)) -lt "$limit" ]; do
    if curl -skf --max-time 2 "https://127.0.0.1:$port/healthz" >"$work/healthz" 2>/dev/null; then
      healthy=1
      break
    fi
    sleep 1
  done
  [ "$healthy" = 1 ] && break
  # A port taken between our probe and QEMU's bind: try another one.
  if ! kill -0 "$qemu_pid" 2>/dev/null && grep -q "host forwarding" "$work/qemu.err"; then continue; fi
  cat "$work/qemu.err" >&2
  failed "no /healthz within ${limit}s"
done
[ "$healthy" = 1 ] || failed "QEMU could not forward a loopback port"
echo "smoke: ok   /healthz $(cat "$work/healthz") after $(($(date +%s) - started)) s"

status=$(curl -sk --max-time 10 -o "$work/attestation" -w '%{http_code}' "https://127.0.0.1:$port/v1/attestation")
[ "$status" = 503 ] || failed "/v1/attestation answered $status, not 503"
grep -q '"code":"service_unavailable"' "$work/attestation" || failed "/v1/attestation 503 without code service_unavailable: $(cat "$work/attestation")"
echo "smoke: ok   /v1/attestation 503: $(cat "$work/attestation")"

wait_console() { # wait_console PATTERN: until the console shows it (bounded by the boot's limit)
  until grep -q "$1" "$console"; do
    [ $(($(date +%s) - started)) -lt "$limit" ] || failed "the console never showed '$1'"
    sleep 1
  done
}
wait_console "umbra-init: listening sockets end"
listening=$(grep -o 'umbra-init: listening tcp6\? [0-9A-F:]*' "$console" | awk '{print $3 " " $4}')
others=$(grep 'umbra-init: listening udp' "$console" || true)
[ -n "$listening" ] || failed "no listening socket reported"
echo "$listening" | grep -v ':1F90$' && failed "something listens besides the coordinator (above)"
[ -z "$others" ] || failed "bound UDP sockets: $others"
echo "smoke: ok   listening: $(echo "$listening" | tr '\n' ' ')(port 0x1F90 = 8080, the coordinator only)"
grep -q 'umbra-init: coordinator Uid:[[:space:]]*1000' "$console" || failed "the coordinator does not run as uid 1000"
grep -q 'umbra-init: coordinator NoNewPrivs:[[:space:]]*1' "$console" || failed "the coordinator may gain privileges (NoNewPrivs)"
echo "smoke: ok   the coordinator runs as uid 1000 with no_new_privs"

# Type on the console: a shell would evaluate the arithmetic and print 4242 (the console only ever
# echoes the input itself, which holds no 4242).
marker='umbra$((2121*2))smoke'
printf '\r\n\r\necho %s\r\nid\r\n' "$marker" >&3
# Let the guest process the input: /healthz again proves the VM ran past it.
curl -skf --max-time 10 "https://127.0.0.1:$port/healthz" >/dev/null || failed "/healthz after typing on the console"
if grep -q 'umbra4242smoke\|uid=0\|uid=1000' "$console"; then failed "a shell answered on the console"; fi
if grep -Eq '(^|[[:space:]])(/ #|~ #|# $|\$ $)|login:|Please press Enter' "$console"; then failed "a prompt or login appeared on the console"; fi
echo "smoke: ok   no shell, prompt or login on the console"
echo "smoke: passed in $(($(date +%s) - started)) s"
