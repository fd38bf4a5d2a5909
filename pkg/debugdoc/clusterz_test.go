package debugdoc

import (
	"encoding/json"
	"testing"
)

// TestClusterzWire pins istiod's JSON shape of /debug/clusterz, which
// istioctl remote-clusters decodes into istio.io/istio/pkg/cluster.DebugInfo
// ({"id","secretName","syncStatus"}).
func TestClusterzWire(t *testing.T) {
	if ClusterzPath != "/debug/clusterz" {
		t.Errorf("ClusterzPath %q, want istiod's /debug/clusterz", ClusterzPath)
	}
	doc := Clusterz{
		{ID: "cluster-1", SecretName: "istio-system/remotes", SyncStatus: SyncStatusSynced},
		{ID: "cluster-2", SecretName: "istio-system/remotes", SyncStatus: SyncStatusTimeout},
	}
	got, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"id":"cluster-1","secretName":"istio-system/remotes","syncStatus":"synced"},` +
		`{"id":"cluster-2","secretName":"istio-system/remotes","syncStatus":"timeout"}]`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var back Clusterz
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if e, ok := back.Cluster("cluster-2"); !ok || e != doc[1] {
		t.Errorf("Cluster(cluster-2) = %+v, %v", e, ok)
	}
	if _, ok := back.Cluster("nope"); ok {
		t.Error("Cluster(nope) found")
	}
}
