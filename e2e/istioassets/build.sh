#!/usr/bin/env bash
# Builds Istio's pilot-agent and istioctl from the Go module proxy, for the
# e2e tests that run Istio's own data plane and tools against the hub.
#
#   bash e2e/istioassets/build.sh              # build if needed (no-op when cached)
#   bash e2e/istioassets/build.sh --print-dir  # print the output dir, don't build
#   bash e2e/istioassets/build.sh --discovery  # build istiod's pilot-discovery (make istiod)
#   bash e2e/istioassets/build.sh --pilot-agent  # pilot-agent alone (make demo as root)
#
# Output: <repo>/bin/istio/<version>/{pilot-agent,istioctl,envoy_bootstrap_tmpl.json,.stamp}
# and, with --discovery, pilot-discovery (istiod's server, for the side-by-side
# scale bench only: `make bench-scale`; `make test` does not build it).
# pilot-agent does not embed Envoy's bootstrap template: Istio's proxy image
# carries it (/var/lib/istio/envoy/envoy_bootstrap_tmpl.json), so it is
# copied from the module next to the binaries.
# The version is istio.io/istio's in the committed go.mod next to this
# script (bump: go get istio.io/istio@<version> && go mod tidy). Progress goes
# to stderr; stdout only carries the directory (--print-dir).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

version="$(awk '$1 == "istio.io/istio" && $2 ~ /^v[0-9]/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || { echo "istio-assets: no istio.io/istio version in $here/go.mod" >&2; exit 1; }
outdir="$root/bin/istio/$version"

targets="pilot-agent istioctl"
case "${1:-}" in
  --print-dir) printf '%s\n' "$outdir"; exit 0 ;;
  --discovery) targets="pilot-discovery" ;;
  --pilot-agent) targets="pilot-agent" ;;
  "") ;;
  *) echo "usage: $0 [--print-dir|--discovery|--pilot-agent]" >&2; exit 2 ;;
esac

sha256() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; }
fingerprint="$(cat "$here/go.mod" "$here/go.sum" | sha256 | awk '{print $1}')"
stamp="$outdir/.stamp"
[[ "$targets" == pilot-discovery ]] && stamp="$outdir/.stamp-discovery"
[[ "$targets" == pilot-agent ]] && stamp="$outdir/.stamp-agent"

up_to_date() {
  local t
  for t in $targets; do [[ -x "$outdir/$t" ]] || return 1; done
  [[ "$targets" == pilot-discovery || -f "$outdir/envoy_bootstrap_tmpl.json" ]] || return 1
  [[ -f "$stamp" ]] && grep -qx "fingerprint=$fingerprint" "$stamp"
}
if up_to_date; then
  echo "istio-assets: $targets up to date at $outdir" >&2
  exit 0
fi

export GOWORK=off
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export CGO_ENABLED=0
GOOS="$(go env GOHOSTOS)"; GOARCH="$(go env GOHOSTARCH)"; export GOOS GOARCH

mkdir -p "$outdir"
rm -f "$stamp"
tmpdir="$(mktemp -d "$outdir/.build.XXXXXX")"
trap 'rm -rf "$tmpdir"' EXIT

# Istio stamps its version through istio.io/istio/pkg/version; the agent
# reports it to the control plane (ISTIO_VERSION), so give it the one Istio's
# own Makefile would: the module's VERSION file plus "-dev".
# `go list -m` names the module's directory only once it is downloaded.
(cd "$here" && go mod download istio.io/istio)
istio_dir="$(cd "$here" && go list -m -f '{{.Dir}}' istio.io/istio)"
[[ -f "$istio_dir/VERSION" ]] || { echo "istio-assets: no VERSION file in istio.io/istio at '$istio_dir'" >&2; exit 1; }
istio_version="$(cat "$istio_dir/VERSION")-dev"
ldflags="-s -w -X istio.io/istio/pkg/version.buildVersion=$istio_version -X istio.io/istio/pkg/version.buildStatus=Clean"
start=$SECONDS
pkgs=()
for t in $targets; do
  case "$t" in
    istioctl) pkgs+=(istio.io/istio/istioctl/cmd/istioctl) ;;
    *) pkgs+=("istio.io/istio/pilot/cmd/$t") ;;
  esac
done
cold="~9 min" # istioctl is most of it; pilot-agent alone ~1 min, pilot-discovery ~6
[[ "$targets" == pilot-agent ]] && cold="~1 min"
echo "istio-assets: building $targets $version (a cold build takes $cold on 2 cores)..." >&2
(cd "$here" && go build -ldflags="$ldflags" -o "$tmpdir/" "${pkgs[@]}")

if [[ "$targets" != pilot-discovery ]]; then
  install -m 0644 "$istio_dir/tools/packaging/common/envoy_bootstrap.json" "$tmpdir/envoy_bootstrap_tmpl.json"
  mv -f "$tmpdir/envoy_bootstrap_tmpl.json" "$outdir/envoy_bootstrap_tmpl.json"
fi
for t in $targets; do mv -f "$tmpdir/$t" "$outdir/$t"; done
{
  echo "istio=$version ($istio_version)"
  echo "go=$(go env GOVERSION)"
  echo "fingerprint=$fingerprint"
} > "$stamp"
echo "istio-assets: built $targets in $((SECONDS - start))s at $outdir" >&2
