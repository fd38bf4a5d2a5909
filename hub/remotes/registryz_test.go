package remotes_test

import (
	"slices"
	"testing"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// TestRegistryzStates: every state the remotes package reports is one the
// document declares, so readers of debugdoc.Registryz know it.
func TestRegistryzStates(t *testing.T) {
	states := []remotes.State{
		remotes.StateInvalid, remotes.StateSyncing, remotes.StateSynced, remotes.StateUnreachable,
		remotes.StateTimeout, remotes.StateReplicated, remotes.StateCredentialExpiring,
	}
	if len(states) != len(debugdoc.ClusterStates) {
		t.Errorf("remotes has %d states, debugdoc %d", len(states), len(debugdoc.ClusterStates))
	}
	for _, s := range states {
		if !slices.Contains(debugdoc.ClusterStates, debugdoc.ClusterState(s)) {
			t.Errorf("remotes state %q is not a debugdoc.ClusterState", s)
		}
	}
}
