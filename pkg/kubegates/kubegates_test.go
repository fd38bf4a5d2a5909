package kubegates

import (
	"os"
	"testing"

	clientfeatures "k8s.io/client-go/features"
)

type fixed map[clientfeatures.Feature]bool

func (f fixed) Enabled(k clientfeatures.Feature) bool { return f[k] }

func TestGates(t *testing.T) {
	g := gates{base: fixed{clientfeatures.WatchListClient: true, clientfeatures.InformerResourceVersion: true}}
	if g.Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient is on")
	}
	if !g.Enabled(clientfeatures.InformerResourceVersion) {
		t.Error("another feature lost its base value")
	}
	if g.Enabled(clientfeatures.ClientsAllowCBOR) {
		t.Error("a feature off in the base is on")
	}
}

func TestDisableWatchList(t *testing.T) {
	t.Setenv(envWatchList, "true")
	if DisableWatchList() {
		t.Fatal("replaced the gates although the operator named the feature")
	}
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatal("KUBE_FEATURE_WatchListClient=true is not honoured")
	}
	if err := os.Unsetenv(envWatchList); err != nil {
		t.Fatal(err)
	}
	if !DisableWatchList() {
		t.Fatal("did not replace the gates")
	}
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient is still on")
	}
}
