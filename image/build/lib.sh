# image/build/lib.sh: shared by the image scripts (sourced, never run). Paths, the lock reader, the
# temporary apt configuration and the fail-closed checks. See image/README.md.
set -euo pipefail

IMAGE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$IMAGE_DIR/.." && pwd)
LOCK="$IMAGE_DIR/inputs.lock"
# Downloads and the firmware build cache live outside the repository (and outside dist/), so a clean
# checkout, `make clean` or a second build folder reuses them. Override with UMBRA_IMAGE_CACHE.
CACHE="${UMBRA_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/umbra-image}"
# Debian's archive only; the signing keys are the machine's debian-archive-keyring.
DEBIAN_MIRROR="${UMBRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SECURITY="${UMBRA_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

say() { echo "image: $*" >&2; }
die() { echo "image: ERROR: $*" >&2; exit 1; }

# lock_rows KIND: the lock's rows of that kind, without comments ("kind origin name version sha256").
lock_rows() { awk -v k="$1" '$1 == k { print }' "$LOCK"; }
# lock_field KIND NAME COLUMN: one column (1-based) of the row KIND/NAME.
lock_field() {
  local v
  v=$(awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && $3 == n { print $c; exit }' "$LOCK")
  [ -n "$v" ] || die "image/inputs.lock has no '$1' row named '$2'"
  echo "$v"
}

# check_sha FILE EXPECTED: fails closed on a mismatch, naming both digests.
check_sha() {
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || die "$(basename "$1"): sha256 $got, but image/inputs.lock pins $2. Refusing to build."
}

# An apt configuration of our own (sources, lists, cache) in $CACHE/apt: the machine's sources and
# package state are neither read nor changed.
APT_DIR="$CACHE/apt"
apt_opts() {
  echo "-o Dir::Etc::SourceList=$APT_DIR/sources.list -o Dir::Etc::SourceParts=/dev/null" \
    "-o Dir::State::Lists=$APT_DIR/lists -o Dir::Cache=$APT_DIR/cache" \
    "-o Dir::State::status=$APT_DIR/status -o APT::Sandbox::User=root -o Debug::NoLocking=1"
}
apt_setup() {
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  : >"$APT_DIR/status"
  [ -r "$KEYRING" ] || die "$KEYRING is missing (apt-get install debian-archive-keyring)"
  cat >"$APT_DIR/sources.list" <<SOURCES
deb [arch=amd64 signed-by=$KEYRING] $DEBIAN_MIRROR bookworm main
deb [arch=amd64 signed-by=$KEYRING] $DEBIAN_MIRROR bookworm-backports main
deb [arch=amd64 signed-by=$KEYRING] $DEBIAN_SECURITY bookworm-security main
deb-src [signed-by=$KEYRING] $DEBIAN_MIRROR trixie main
SOURCES
  # shellcheck disable=SC2046
  apt-get $(apt_opts) -qq update || die "apt-get update failed for the image's sources ($APT_DIR/sources.list)"
}

# need TOOL PACKAGE...: installs the Debian packages when TOOL is missing (as the Makefile targets do).
need() {
  local tool=$1; shift
  command -v "$tool" >/dev/null 2>&1 || need_packages "$@"
}
# need_packages PACKAGE...: installs them from the machine's Debian sources (apt-get update once per run).
apt_updated=0
need_packages() {
  say "installing $* from Debian"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if [ "$apt_updated" = 0 ]; then $sudo apt-get update -qq || die "apt-get update failed"; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    die "could not install $*"
}

# need_qemu: qemu-system-x86_64 >= 9.1. bookworm's QEMU 7.2 boots the 6.12 kernel unreliably under TCG
# (double faults and NULL dereferences in about one boot in three, seen on this build machine); 10.0 from
# bookworm-backports boots it every time and is what SNP hosts need anyway (image/README.md). Installed
# from bookworm-backports through a temporary sources list (the machine's own sources are not changed).
need_qemu() {
  local version
  version=$({ qemu-system-x86_64 --version 2>/dev/null || true; } | awk 'NR == 1 { print $4 }')
  if [ -n "$version" ] && printf '9.1\n%s\n' "$version" | sort -V -C; then return 0; fi
  say "installing QEMU >= 9.1 from bookworm-backports (found: ${version:-none})"
  local sudo="" dir
  [ "$(id -u)" = 0 ] || sudo="sudo"
  dir=$(mktemp -d)
  mkdir -p "$dir/lists/partial"
  cat >"$dir/sources.list" <<SOURCES
deb [signed-by=$KEYRING] $DEBIAN_MIRROR bookworm main
deb [signed-by=$KEYRING] $DEBIAN_MIRROR bookworm-updates main
deb [signed-by=$KEYRING] $DEBIAN_SECURITY bookworm-security main
deb [signed-by=$KEYRING] $DEBIAN_MIRROR bookworm-backports main
SOURCES
  local opts="-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$dir/lists"
  # shellcheck disable=SC2086
  $sudo apt-get $opts update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get $opts install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null ||
    die "could not install qemu-system-x86 from bookworm-backports"
  rm -rf "$dir"
}
