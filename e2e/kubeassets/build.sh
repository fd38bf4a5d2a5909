#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy for use as
# controller-runtime envtest assets (KUBEBUILDER_ASSETS).
#
#   bash e2e/kubeassets/build.sh              # build if needed (no-op when cached)
#   bash e2e/kubeassets/build.sh --print-dir  # print the assets dir, don't build
#
# Output: <repo>/bin/k8s/<k8s>-etcd<etcd>/{kube-apiserver,etcd,.stamp}
# Versions come from the committed go.mod files next to this script; bump them
# with gen-gomod.sh. Progress messages go to stderr; stdout is kept for the
# directory path (--print-dir) so it can be used in $(...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

modversion() { # <go.mod> <module path>
  local v
  v="$(awk -v m="$2" '$1 == m && $2 ~ /^v[0-9]/ {print $2; exit}' "$1")"
  [[ -n "$v" ]] || { echo "k8s-assets: no version for $2 in $1" >&2; exit 1; }
  printf '%s\n' "$v"
}

k8s_version="$(modversion "$here/kube-apiserver/go.mod" k8s.io/kubernetes)"   # v1.36.3
etcd_version="$(modversion "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"      # v3.6.8
key="${k8s_version#v}-etcd${etcd_version#v}"
outdir="$root/bin/k8s/$key"

case "${1:-}" in
  --print-dir) printf '%s\n' "$outdir"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-dir]" >&2; exit 2 ;;
esac

# Fingerprint of everything that determines the binaries; stored in the stamp
# so that editing go.mod/go.sum (without changing the key) forces a rebuild.
sha256() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; }
fingerprint="$(cat "$here/kube-apiserver/go.mod" "$here/kube-apiserver/go.sum" \
                   "$here/etcd/go.mod" "$here/etcd/go.sum" | sha256 | awk '{print $1}')"
stamp="$outdir/.stamp"

if [[ -x "$outdir/kube-apiserver" && -x "$outdir/etcd" && -f "$stamp" ]] &&
   grep -qx "fingerprint=$fingerprint" "$stamp"; then
  echo "k8s-assets: up to date at $outdir" >&2
  exit 0
fi

# Isolate the build from the caller's Go environment: no workspace, no
# -mod=vendor/-race/-tags from GOFLAGS, host platform, static binaries.
export GOWORK=off
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export CGO_ENABLED=0
GOOS="$(go env GOHOSTOS)"; GOARCH="$(go env GOHOSTARCH)"; export GOOS GOARCH

mkdir -p "$outdir"
rm -f "$stamp"
tmpdir="$(mktemp -d "$outdir/.build.XXXXXX")"
trap 'rm -rf "$tmpdir"' EXIT

k8s_minor="${k8s_version#v1.}"; k8s_minor="${k8s_minor%%.*}"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
done

start=$SECONDS
echo "k8s-assets: building etcd $etcd_version..." >&2
(cd "$here/etcd" && go build -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version" \
   -o "$tmpdir/etcd" go.etcd.io/etcd/server/v3)

echo "k8s-assets: building kube-apiserver $k8s_version (cold build takes ~7 min)..." >&2
(cd "$here/kube-apiserver" && go build -ldflags="$kube_ldflags" \
   -o "$tmpdir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)

mv -f "$tmpdir/etcd" "$outdir/etcd"
mv -f "$tmpdir/kube-apiserver" "$outdir/kube-apiserver"
{
  echo "kube-apiserver=$k8s_version"
  echo "etcd=$etcd_version"
  echo "go=$(go env GOVERSION)"
  echo "fingerprint=$fingerprint"
} > "$stamp"
echo "k8s-assets: built in $((SECONDS - start))s at $outdir" >&2
