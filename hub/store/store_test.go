package store

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

// A cluster removed and added again, now owned by a replica that never
// saw it: its snapshot is newer than the others' tombstone and accepted.
func TestReAddedClusterUnderANewReplica(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	var sent []*federation.PeerMessage
	oldOwner := New(Options{Self: "hub-0", Clock: clocktesting.NewFakePassiveClock(t0),
		Publish: func(m *federation.PeerMessage) { sent = append(sent, m) }})
	other := New(Options{Self: "hub-1", Clock: clocktesting.NewFakePassiveClock(t0)})

	// hub-0 owns c1 for a while (several handovers raised its term), and
	// hub-1 follows; then c1 is removed everywhere.
	var gen model.Generation
	for range 3 {
		gen = oldOwner.NextGeneration("c1")
		if err := oldOwner.ReplaceCluster("c1", gen, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.ApplySnapshot(*sent[len(sent)-1].Snapshot); err != nil {
		t.Fatal(err)
	}
	oldOwner.RemoveCluster("c1")
	other.RemoveCluster("c1")

	// c1 comes back a second later; its owner is hub-2, new to the fleet.
	sent = nil
	newOwner := New(Options{Self: "hub-2", Clock: clocktesting.NewFakePassiveClock(t0.Add(time.Second)),
		Publish: func(m *federation.PeerMessage) { sent = append(sent, m) }})
	g := newOwner.NextGeneration("c1")
	if g <= gen {
		t.Fatalf("new owner's generation %d is not above the removed incarnation's %d", g, gen)
	}
	if err := newOwner.ReplaceCluster("c1", g, nil); err != nil {
		t.Fatal(err)
	}
	if err := other.ApplySnapshot(*sent[0].Snapshot); err != nil {
		t.Fatalf("the re-added cluster's snapshot was refused: %v", err)
	}

	// A late message of the removed incarnation still stays out.
	late := federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: uint64(gen), Owner: "hub-0"}}
	if err := other.ApplySnapshot(late); !errors.Is(err, federation.ErrStale) && !errors.Is(err, federation.ErrRemoved) {
		t.Fatalf("a late snapshot of the removed incarnation: %v", err)
	}
}
