#!/usr/bin/env bash
# Installs Debian's chromium for the e2e console test (a real headless
# browser; tool downloads of their own browsers are not possible offline, the
# Debian archive is). A no-op when a chromium is already installed.
#
#   bash e2e/browserassets/install.sh               # install if needed
#   bash e2e/browserassets/install.sh --print-path  # print the browser's path, don't install
#
# MESHFED_CHROMIUM_BIN names another browser binary (Chrome or Chromium) to
# use instead; then nothing is installed. Progress goes to stderr; stdout only
# carries the path (--print-path).
set -euo pipefail

default=/usr/bin/chromium
want="${MESHFED_CHROMIUM_BIN:-$default}"

case "${1:-}" in
  --print-path) printf '%s\n' "$want"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac

check() { # <binary>: it must start and say its version
  local out
  out="$("$1" --version 2>&1)" || { echo "browser: $1 --version failed: $out" >&2; return 1; }
  echo "browser: $out ($1)" >&2
}

if [[ -x "$want" ]]; then
  check "$want"
  exit 0
fi
if [[ "$want" != "$default" ]]; then
  echo "browser: MESHFED_CHROMIUM_BIN=$want is not an executable" >&2
  exit 1
fi

# apt-get needs root; use sudo when we are not root and it is there.
sudo=()
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null; then sudo=(sudo -n); else
    echo "browser: $default is missing and installing it needs root (apt-get install chromium), or set MESHFED_CHROMIUM_BIN" >&2
    exit 1
  fi
fi
command -v apt-get >/dev/null || { echo "browser: $default is missing and this machine has no apt-get: install Chromium and set MESHFED_CHROMIUM_BIN" >&2; exit 1; }

start=$SECONDS
echo "browser: installing Debian's chromium with apt-get (once; ~1-2 min, later runs are instant)" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2
check "$default"
echo "browser: installed in $((SECONDS - start)) s" >&2
