#!/usr/bin/env bash
# image/check/reproducible.sh: two builds of the image in two folders give identical bytes. Copies the
# repository's files (tracked, as in the working tree) into two temporary folders at different depths,
# builds dist/umbra-coordinator (the Makefile's BUILD_FLAGS) and dist/image (image/build/image.sh) in
# each, and compares every file. On a difference, diffoscope's report goes to the log (installed from
# Debian when missing) and the check fails. The AmdSev OVMF comes from the cache in both builds (its own
# reproducibility needs its fixed build path: image/README.md).
. "$(dirname "$0")/../build/lib.sh"

need git git
[ -x "$REPO_DIR/node_modules/.bin/bun" ] || die "no node_modules/.bin/bun: run make deps first"
flags=$(make -s -C "$REPO_DIR" --eval='print-build-flags: ; @echo $(BUILD_FLAGS)' print-build-flags)
modules=$(readlink -f "$REPO_DIR/node_modules")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

build_in() { # build_in DIR: a copy of the repository in DIR, its binary and image
  mkdir -p "$1"
  (cd "$REPO_DIR" && git ls-files -z --cached --others --exclude-standard | grep -zv '^node_modules$' |
    tar --null -T - -c) | tar -x -C "$1"
  ln -s "$modules" "$1/node_modules"
  # The console's assets (console/dist, ignored by git) are built in each copy, as make build does.
  (cd "$1" && "$modules/.bin/bun" console/build.ts >/dev/null && "$modules/.bin/bun" build $flags src/coordinator/main.ts src/store/sqlite/checkpoint-worker.ts --outfile dist/umbra-coordinator >/dev/null) ||
    die "bun build failed in $1"
  "$1/image/build/image.sh" "$1/dist/image" 2>&1 | sed "s|^|  [$(basename "$1")] |" >&2
}
build_in "$work/a/umbra"
build_in "$work/b/elsewhere/deeper/umbra-copy"

a="$work/a/umbra/dist"
b="$work/b/elsewhere/deeper/umbra-copy/dist"
different=0
for file in umbra-coordinator $(cd "$a/image" && ls); do
  left="$a/$file" right="$b/$file"
  [ -f "$left" ] || { left="$a/image/$file"; right="$b/image/$file"; }
  if cmp -s "$left" "$right"; then
    say "identical: $file $(sha256sum "$left" | cut -d' ' -f1)"
  else
    different=1
    say "DIFFERENT: $file"
    need diffoscope diffoscope-minimal
    diffoscope --max-report-size 200000 --text - "$left" "$right" || true
  fi
done
[ "$different" = 0 ] || die "the two builds differ (diffoscope above)"
say "two builds in two folders are identical ($(($(date +%s) - started)) s)"
