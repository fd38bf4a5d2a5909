package replication

import (
	"fmt"
	"testing"

	"github.com/meshfed/meshfed/federation"
)

// TestWritesOnePerName: of three replicas that see the same members, each
// name is written by exactly one, and the names spread over all three; a
// replica alone writes everything.
func TestWritesOnePerName(t *testing.T) {
	members := []federation.ReplicaID{"hub-a", "hub-b", "hub-c"}
	var owns []*Ownership
	for _, id := range members {
		o := NewOwnership(id, 2)
		o.setMembers(members, nil)
		owns = append(owns, o)
	}
	perReplica := map[federation.ReplicaID]int{}
	for i := range 300 {
		name := fmt.Sprintf("VirtualService/demo/vs-%d", i)
		writers := 0
		for _, o := range owns {
			if o.Writes(name) {
				writers++
				perReplica[o.self]++
			}
		}
		if writers != 1 {
			t.Fatalf("%s has %d writers, want 1", name, writers)
		}
	}
	for _, id := range members {
		if perReplica[id] < 50 {
			t.Errorf("replica %s writes %d of 300 names: not spread (%v)", id, perReplica[id], perReplica)
		}
	}
	if alone := NewOwnership("hub-a", 1); !alone.Writes("anything") {
		t.Error("a replica alone does not write")
	}
}
