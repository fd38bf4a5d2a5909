package kubegates

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// envWatchList is client-go's own variable for the feature; when it is set,
// the operator's choice stands.
const envWatchList = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// gates answers as base does, except that WatchListClient is off.
type gates struct{ base clientfeatures.Gates }

func (g gates) Enabled(f clientfeatures.Feature) bool {
	if f == clientfeatures.WatchListClient {
		return false
	}
	return g.base.Enabled(f)
}

// DisableWatchList turns client-go's WatchListClient off for the process
// (see the package doc), unless KUBE_FEATURE_WatchListClient is set. It
// reports whether it did. Call it from main before any client exists.
func DisableWatchList() bool {
	if _, set := os.LookupEnv(envWatchList); set {
		return false
	}
	clientfeatures.ReplaceFeatureGates(gates{base: clientfeatures.FeatureGates()})
	return true
}
