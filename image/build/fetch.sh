#!/usr/bin/env bash
# image/build/fetch.sh [--sources]: downloads the pinned inputs of image/inputs.lock from Debian into
# $CACHE/debs and $CACHE/src (image/build/lib.sh), checks each SHA-256 against the lock and unpacks the
# .debs into $CACHE/root/<package>. Fails closed: a version Debian no longer serves, or any byte that
# differs, stops the build with a message naming the input. --sources also fetches the edk2 source
# tarballs (make firmware). Files already in the cache are re-checked, never trusted.
. "$(dirname "$0")/lib.sh"

want_sources=0
[ "${1:-}" = "--sources" ] && want_sources=1

need apt-get apt
need dpkg-deb dpkg
mkdir -p "$CACHE/debs" "$CACHE/src" "$CACHE/root"
updated=0
ensure_apt() { [ "$updated" = 1 ] || { apt_setup; updated=1; }; }

# .debs: apt-get download NAME=VERSION verifies the file against the signed Release -> Packages chain;
# we then check it against the lock's digest.
while read -r _ suite name version sha; do
  deb=$(find "$CACHE/debs" -maxdepth 1 -name "${name}_*.deb" | head -1)
  if [ -z "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$sha" ]; then
    ensure_apt
    rm -f "$CACHE/debs/${name}_"*.deb
    say "downloading $name=$version ($suite)"
    # shellcheck disable=SC2046
    (cd "$CACHE/debs" && apt-get $(apt_opts) -qq download "$name=$version" 2>&1) >"$CACHE/debs/.log" || {
      cat "$CACHE/debs/.log" >&2
      die "Debian no longer serves $name=$version ($suite). The lock pins it; update image/inputs.lock on purpose (new digests, new measurements.json), or fetch it from snapshot.debian.org into $CACHE/debs."
    }
    deb=$(find "$CACHE/debs" -maxdepth 1 -name "${name}_*.deb" | head -1)
    [ -n "$deb" ] || die "apt-get download $name=$version left no .deb in $CACHE/debs"
  fi
  check_sha "$deb" "$sha"
  # Unpacked afresh every run: the tree under root/ is derived, never an input.
  rm -rf "$CACHE/root/$name"
  mkdir -p "$CACHE/root/$name"
  dpkg-deb -x "$deb" "$CACHE/root/$name"
done < <(lock_rows deb)

# Files the image takes from the packages: checked one by one.
for kind in file lib module; do
  while read -r _ pkg path _ sha; do
    [ -f "$CACHE/root/$pkg/$path" ] || die "$path is not in $pkg (image/inputs.lock, $kind row)"
    check_sha "$CACHE/root/$pkg/$path" "$sha"
  done < <(lock_rows "$kind")
done

if [ "$want_sources" = 1 ]; then
  while read -r _ suite file version sha; do
    if [ -f "$CACHE/src/$file" ] && [ "$(sha256sum "$CACHE/src/$file" | cut -d' ' -f1)" = "$sha" ]; then continue; fi
    ensure_apt
    package=${file%%_*}
    # The URL and digest from the signed Sources index (apt-get source itself stops on the .dsc, which
    # the mirror has been seen to answer 404).
    # shellcheck disable=SC2046
    uri=$(apt-get $(apt_opts) -qq source --print-uris "$package=$version" 2>/dev/null |
      awk -v f="$file" '$2 == f { gsub("\047", "", $1); print $1 }')
    [ -n "$uri" ] || die "Debian's $suite Sources no longer list $file (source $package=$version): update image/inputs.lock on purpose, or fetch it from snapshot.debian.org into $CACHE/src."
    say "downloading $file"
    curl -fsSL --retry 3 -o "$CACHE/src/$file.part" "$uri" || die "download of $uri failed"
    mv "$CACHE/src/$file.part" "$CACHE/src/$file"
    check_sha "$CACHE/src/$file" "$sha"
  done < <(lock_rows src)
fi
say "inputs match image/inputs.lock ($CACHE)"
