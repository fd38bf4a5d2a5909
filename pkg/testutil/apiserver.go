package testutil

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the directory of the kube-apiserver and etcd binaries
// that `make k8s-assets` builds; the Makefile's test targets set it.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// Assets returns the envtest binaries' directory, failing t when it is not
// set (a test that needs an apiserver must not pass without one).
func Assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		t.Fatalf("%s is not set: run `make test-unit` (it builds the kube-apiserver and etcd first)", AssetsEnv)
	}
	return dir
}

// StartAPIServer starts env (a zero Environment is a bare apiserver) with
// the binaries of Assets, stops it when t ends, and returns its admin
// configuration.
func StartAPIServer(t testing.TB, env *envtest.Environment) *rest.Config {
	t.Helper()
	env.BinaryAssetsDirectory = Assets(t)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}
