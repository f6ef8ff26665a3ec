#!/usr/bin/env bash
# Fetch the benchmark corpora for the kb-retrieval benchmark (crates/index/benches/kb.rs).
#
# Downloads Debian's python3.11-doc and linux-doc-6.1 packages with `apt-get download`
# and unpacks them with `dpkg-deb -x` into a cache directory OUTSIDE the repository
# (default /work/.cache/capstan-bench, override with $CAPSTAN_BENCH_CORPUS). Nothing of
# the corpus is ever committed. Idempotent: an already unpacked package is left alone.
#
# Result:
#   $CACHE/python3.11-doc/usr/share/doc/python3.11/html/_sources/**.rst.txt
#   $CACHE/linux-doc/usr/share/doc/linux-doc/**            (rst sources of the kernel docs)
# The bench prints the exact roots it used.
set -euo pipefail

CACHE="${CAPSTAN_BENCH_CORPUS:-/work/.cache/capstan-bench}"
mkdir -p "$CACHE/debs"

# apt-cache needs fresh lists to see anything; run update once if the package is unknown.
have_pkg() { apt-cache show "$1" >/dev/null 2>&1; }
if ! have_pkg python3.11-doc; then
  apt-get update -qq
fi

# The linux-doc package name carries the kernel version; take 6.1 if this release has it,
# otherwise the nearest linux-doc-<version> apt knows about.
LINUX_PKG=linux-doc-6.1
if ! have_pkg "$LINUX_PKG"; then
  LINUX_PKG="$(apt-cache search --names-only '^linux-doc-[0-9.]+$' | awk '{print $1}' | sort -V | tail -1)"
  if [ -z "$LINUX_PKG" ]; then
    echo "fetch-corpus: no linux-doc-<version> package known to apt" >&2
    exit 1
  fi
  echo "fetch-corpus: linux-doc-6.1 not available, using $LINUX_PKG" >&2
fi

fetch() { # fetch <package> <unpack-dir-name>
  local pkg="$1" dest="$CACHE/$2"
  if [ -f "$dest/.unpacked" ]; then
    echo "fetch-corpus: $pkg already in $dest"
    return
  fi
  (cd "$CACHE/debs" && apt-get download "$pkg")
  local deb
  deb="$(ls -t "$CACHE/debs/${pkg}"_*.deb | head -1)"
  rm -rf "$dest"
  mkdir -p "$dest"
  dpkg-deb -x "$deb" "$dest"
  echo "$deb" >"$dest/.unpacked"
  echo "fetch-corpus: unpacked $deb into $dest"
}

fetch python3.11-doc python3.11-doc
fetch "$LINUX_PKG" linux-doc

PY_SOURCES="$CACHE/python3.11-doc/usr/share/doc/python3.11/html/_sources"
if [ ! -d "$PY_SOURCES/faq" ]; then
  echo "fetch-corpus: expected $PY_SOURCES/faq to exist" >&2
  exit 1
fi
echo "python sources: $PY_SOURCES ($(find "$PY_SOURCES" -name '*.rst.txt' | wc -l) .rst.txt files)"
LINUX_ROOT="$(find "$CACHE/linux-doc" -type d -name Documentation -o -type d -name linux-doc | head -1)"
echo "linux-doc root: ${LINUX_ROOT:-$CACHE/linux-doc} ($(find "$CACHE/linux-doc" -type f | wc -l) files)"
