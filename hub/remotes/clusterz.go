package remotes

import "github.com/meshfed/meshfed/pkg/debugdoc"

// Clusterz returns the document of /debug/clusterz (debugdoc.Clusterz):
// every remote cluster with its state in istiod's words, so that `istioctl
// remote-clusters` reads the hub. It is never nil, so an empty fleet is
// written as [] as istiod writes it.
func Clusterz(status *Status) debugdoc.Clusterz {
	out := debugdoc.Clusterz{}
	for _, c := range status.Clusters() {
		out = append(out, debugdoc.ClusterzEntry{ID: c.ID, SecretName: c.Secret, SyncStatus: SyncStatusOf(c.State)})
	}
	return out
}

// SyncStatusOf says state in istiod's words. istiod has four; the hub's
// finer states map to what they mean for the endpoints served:
//
//	synced, replicated, credential-expiring  synced   (current state served, here or by its owner)
//	syncing                                  syncing
//	timeout, unreachable                     timeout  (what is served may be stale)
//	invalid                                  closed   (nothing watches it)
func SyncStatusOf(state State) debugdoc.SyncStatus {
	switch state {
	case StateSynced, StateReplicated, StateCredentialExpiring:
		return debugdoc.SyncStatusSynced
	case StateSyncing:
		return debugdoc.SyncStatusSyncing
	case StateTimeout, StateUnreachable:
		return debugdoc.SyncStatusTimeout
	}
	return debugdoc.SyncStatusClosed
}
