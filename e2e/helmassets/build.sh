#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy, for the e2e test that
# installs, upgrades and uninstalls the charts as a user would. It is built
# with `go install helm.sh/helm/v3/cmd/helm@<version>`: helm's own go.mod
# picks every dependency, as in an upstream release build, and meshfed's
# go.mod is not touched.
#
#   bash e2e/helmassets/build.sh               # build if needed (no-op when cached)
#   bash e2e/helmassets/build.sh --print-path  # print the binary's path, don't build
#
# Output: <repo>/bin/helm/<version>/helm. The version is pinned here; keep it
# the helm.sh/helm/v3 version of go.mod (the library the chart tests render
# with), so the CLI and the tests agree on how a chart renders. Progress goes
# to stderr; stdout only carries the path (--print-path).
set -euo pipefail

version=v3.21.4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
outdir="$root/bin/helm/$version"
bin="$outdir/helm"

case "${1:-}" in
  --print-path) printf '%s\n' "$bin"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac

check() { # <binary>: `helm version` must name our version
  local out
  out="$("$1" version --template '{{.Version}}' 2>&1)" || { echo "helm: $1 version failed: $out" >&2; return 1; }
  [[ "$out" == "$version" ]] || { echo "helm: $1 is $out, not $version" >&2; return 1; }
}

if [[ -x "$bin" ]] && check "$bin" 2>/dev/null; then
  echo "helm: up to date at $bin" >&2
  exit 0
fi

mkdir -p "$outdir"
tmpdir="$(mktemp -d "$outdir/.build.XXXXXX")"
trap 'rm -rf "$tmpdir"' EXIT

# Helm's Makefile stamps the version through helm.sh/helm/v3/internal/version;
# without it `helm version` says only the minor version the source names.
start=$SECONDS
echo "helm: building helm $version from the module proxy (a cold build takes ~3 min on 2 cores)..." >&2
GOWORK=off GOFLAGS=-trimpath CGO_ENABLED=0 GOBIN="$tmpdir" \
  go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v3/cmd/helm@$version"
check "$tmpdir/helm"
mv "$tmpdir/helm" "$bin"
echo "helm: built $bin in $((SECONDS - start)) s" >&2
