package debugdoc

import "github.com/meshfed/meshfed/pkg/model"

// Clusterz is the document of /debug/clusterz in istiod's shape, a JSON
// array of {"id","secretName","syncStatus"} (istiod's cluster.DebugInfo),
// so that `istioctl remote-clusters` and other Istio tooling read the hub
// as they read istiod. It holds one entry per remote cluster, sorted by ID;
// /debug/registryz says more about each.
type Clusterz []ClusterzEntry

// ClusterzEntry is one remote cluster in Clusterz.
type ClusterzEntry struct {
	// ID is the cluster ID (the remote secret's data key).
	ID model.ClusterID `json:"id"`
	// SecretName is the remote secret that names the cluster,
	// "<ns>/<name>".
	SecretName string `json:"secretName"`
	// SyncStatus is one of SyncStatuses.
	SyncStatus SyncStatus `json:"syncStatus"`
}

// SyncStatus is a remote cluster's state in istiod's words.
type SyncStatus string

// The values istiod writes (istio.io/istio/pkg/kube/multicluster).
const (
	// SyncStatusSynced: the cluster's state is held and kept current.
	SyncStatusSynced SyncStatus = "synced"
	// SyncStatusSyncing: the cluster is being listed for the first time.
	SyncStatusSyncing SyncStatus = "syncing"
	// SyncStatusTimeout: the cluster's state is not current: its listing
	// did not finish in time, or its apiserver cannot be reached.
	SyncStatusTimeout SyncStatus = "timeout"
	// SyncStatusClosed: nothing watches the cluster.
	SyncStatusClosed SyncStatus = "closed"
)

// SyncStatuses lists every SyncStatus.
var SyncStatuses = []SyncStatus{SyncStatusSynced, SyncStatusSyncing, SyncStatusTimeout, SyncStatusClosed}

// Cluster returns the entry of cluster id.
func (c Clusterz) Cluster(id model.ClusterID) (ClusterzEntry, bool) {
	for _, e := range c {
		if e.ID == id {
			return e, true
		}
	}
	return ClusterzEntry{}, false
}
