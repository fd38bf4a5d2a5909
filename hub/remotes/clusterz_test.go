package remotes_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// TestSyncStatusOf: every state has istiod's word for it.
func TestSyncStatusOf(t *testing.T) {
	want := map[remotes.State]debugdoc.SyncStatus{
		remotes.StateInvalid:            debugdoc.SyncStatusClosed,
		remotes.StateSyncing:            debugdoc.SyncStatusSyncing,
		remotes.StateSynced:             debugdoc.SyncStatusSynced,
		remotes.StateUnreachable:        debugdoc.SyncStatusTimeout,
		remotes.StateTimeout:            debugdoc.SyncStatusTimeout,
		remotes.StateReplicated:         debugdoc.SyncStatusSynced,
		remotes.StateCredentialExpiring: debugdoc.SyncStatusSynced,
	}
	if len(want) != len(debugdoc.ClusterStates) {
		t.Fatalf("the table covers %d states, remotes has %d", len(want), len(debugdoc.ClusterStates))
	}
	for _, s := range debugdoc.ClusterStates {
		if got := remotes.SyncStatusOf(remotes.State(s)); got != want[remotes.State(s)] {
			t.Errorf("SyncStatusOf(%q) = %q, want %q", s, got, want[remotes.State(s)])
		}
	}
}

func TestClusterz(t *testing.T) {
	st := remotes.NewStatus(clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), prometheus.NewRegistry())
	if b, _ := json.Marshal(remotes.Clusterz(st)); string(b) != "[]" {
		t.Errorf("no clusters: %s, want []", b)
	}
	st.Set("cluster-2", "istio-system/remotes", remotes.StateUnreachable, "connection refused")
	st.Set("cluster-1", "istio-system/remotes", remotes.StateSynced, "")
	st.Set("cluster-3", "istio-system/other", remotes.StateReplicated, "")
	want := debugdoc.Clusterz{
		{ID: "cluster-1", SecretName: "istio-system/remotes", SyncStatus: debugdoc.SyncStatusSynced},
		{ID: "cluster-2", SecretName: "istio-system/remotes", SyncStatus: debugdoc.SyncStatusTimeout},
		{ID: "cluster-3", SecretName: "istio-system/other", SyncStatus: debugdoc.SyncStatusSynced},
	}
	got := remotes.Clusterz(st)
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
