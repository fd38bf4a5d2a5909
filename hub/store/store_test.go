package store

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

const echo = model.Hostname("echo.demo.svc.cluster.local")

var t0 = time.Unix(1_750_000_000, 0)

func newStore(self federation.ReplicaID) *Store {
	return New(Options{Self: self, Clock: clocktesting.NewFakePassiveClock(t0)})
}

func shards(c model.ClusterID, addrs ...string) map[model.Hostname]*model.ServiceShard {
	s := &model.ServiceShard{Service: &model.Service{
		Hostname: echo, Name: "echo", Namespace: "demo",
		Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}},
	}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{
			Cluster: c, Address: netip.MustParseAddr(a), Ready: true, Ports: map[string]uint32{"grpc": 18080},
		})
	}
	return map[model.Hostname]*model.ServiceShard{echo: s}
}

// deliver applies everything in from's outbox to each of to.
func deliver(t *testing.T, from *Store, to ...*Store) []error {
	t.Helper()
	var errs []error
	for _, m := range from.TakeOutbox() {
		for _, st := range to {
			switch {
			case m.Snapshot != nil:
				errs = append(errs, st.ApplySnapshot(*m.Snapshot))
			case m.Delta != nil:
				errs = append(errs, st.ApplyDelta(*m.Delta))
			}
		}
	}
	return errs
}

// A cluster removed and added again, now owned by a replica that never
// saw it: the others refuse its first snapshot (they hold a tombstone of
// the old incarnation's term); told so, it republishes above the
// tombstone, and the others accept. No clock is involved.
func TestReAddedClusterUnderANewReplica(t *testing.T) {
	oldOwner, other := newStore("hub-0"), newStore("hub-1")

	// hub-0 owns c1 for a while (several handovers raised its term), and
	// hub-1 follows; then c1 is removed everywhere.
	var gen model.Generation
	for range 3 {
		gen = oldOwner.NextGeneration("c1")
		if err := oldOwner.ReplaceCluster("c1", gen, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range deliver(t, oldOwner, other) {
		if err != nil && !errors.Is(err, federation.ErrStale) && !errors.Is(err, federation.ErrDuplicate) {
			t.Fatal(err)
		}
	}
	removed, _ := other.Version("c1")
	oldOwner.RemoveCluster("c1")
	other.RemoveCluster("c1")
	if err := oldOwner.UpdateShard("c1", gen, echo, nil); !errors.Is(err, model.ErrStaleGeneration) {
		t.Fatalf("write of a removed cluster's watcher: %v", err)
	}
	tomb, ok := other.Tombstone("c1")
	if !ok || tomb != removed {
		t.Fatalf("tombstone = %v %v, want %v", tomb, ok, removed)
	}

	// c1 comes back; its owner is hub-2, new to the fleet.
	newOwner := newStore("hub-2")
	g := newOwner.NextGeneration("c1")
	if err := newOwner.ReplaceCluster("c1", g, shards("c1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if errs := deliver(t, newOwner, other); len(errs) != 1 || !errors.Is(errs[0], federation.ErrRemoved) {
		t.Fatalf("first snapshot of the new incarnation: %v, want ErrRemoved", errs)
	}
	if !newOwner.Superseded("c1", tomb) {
		t.Fatal("told of the tombstone, the new owner did not republish")
	}
	if errs := deliver(t, newOwner, other); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("republished snapshot: %v", errs)
	}
	if v, _ := other.Version("c1"); v.Term <= tomb.Term || v.Owner != "hub-2" {
		t.Fatalf("other holds %v, want hub-2's above %v", v, tomb)
	}
	if m := other.Service(echo); m == nil || len(m.Endpoints) != 1 {
		t.Fatalf("other's view of the re-added cluster: %+v", m)
	}
	// The watcher keeps writing, under the new term.
	if err := newOwner.UpdateShard("c1", g, echo, shards("c1", "10.0.0.1", "10.0.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	if errs := deliver(t, newOwner, other); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("delta after republishing: %v", errs)
	}
	// A second, older tombstone changes nothing.
	if newOwner.Superseded("c1", tomb) || len(newOwner.TakeOutbox()) != 0 {
		t.Fatal("an old tombstone made the owner republish again")
	}

	// A late message of the removed incarnation still stays out.
	late := federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: removed.Term, Owner: "hub-0"}}
	if err := other.ApplySnapshot(late); !errors.Is(err, federation.ErrStale) && !errors.Is(err, federation.ErrRemoved) {
		t.Fatalf("a late snapshot of the removed incarnation: %v", err)
	}
}

// A watcher replaced by a newer local one (a rotated remote secret) can no
// longer write; the new one writes under a higher term.
func TestReplacedWatcherIsStale(t *testing.T) {
	st := newStore("hub-0")
	g1 := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", g1, shards("c1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	v1, _ := st.Version("c1")
	g2 := st.NextGeneration("c1")
	if err := st.UpdateShard("c1", g1, echo, nil); !errors.Is(err, model.ErrStaleGeneration) {
		t.Fatalf("replaced watcher's write: %v", err)
	}
	if err := st.ReplaceCluster("c1", g2, shards("c1", "10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if v2, _ := st.Version("c1"); v2.Term <= v1.Term {
		t.Fatalf("new watcher's version %v is not above %v", v2, v1)
	}
	if sums := st.Clusters(); len(sums) != 1 || sums[0].Version.Term <= v1.Term || sums[0].Endpoints != 1 {
		t.Fatalf("summary = %+v", sums)
	}
}

// The outbox holds local writes in order, and only local writes.
func TestOutboxOrder(t *testing.T) {
	st, peer := newStore("hub-0"), newStore("hub-1")
	g := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", g, shards("c1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	for _, addrs := range [][]string{{"10.0.0.1", "10.0.0.2"}, {"10.0.0.2"}} {
		if err := st.UpdateShard("c1", g, echo, shards("c1", addrs...)[echo]); err != nil {
			t.Fatal(err)
		}
	}
	// A write that changes nothing sends nothing.
	if err := st.UpdateShard("c1", g, echo, shards("c1", "10.0.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Outbox():
	default:
		t.Fatal("no outbox signal after local writes")
	}
	out := st.TakeOutbox()
	if len(out) != 3 || out[0].Snapshot == nil || out[1].Delta == nil || out[2].Delta == nil ||
		out[1].Delta.Version.Seq != 1 || out[2].Delta.Version.Seq != 2 {
		t.Fatalf("outbox = %+v", out)
	}
	for _, m := range out {
		var err error
		if m.Snapshot != nil {
			err = peer.ApplySnapshot(*m.Snapshot)
		} else {
			err = peer.ApplyDelta(*m.Delta)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(st.TakeOutbox()) != 0 || len(peer.TakeOutbox()) != 0 {
		t.Fatal("outbox not emptied, or a replicated write was sent on")
	}
	if m := peer.Service(echo); m == nil || len(m.Endpoints) != 1 {
		t.Fatalf("peer's view: %+v", m)
	}
}

// TestNoPublishUnderTheLock: the consumer of the outbox is stuck in the
// middle of sending (a peer that does not read, a 100k-endpoint snapshot
// being encoded); writes and xDS reads of the store go on regardless.
func TestNoPublishUnderTheLock(t *testing.T) {
	st := newStore("hub-0")
	g := st.NextGeneration("c1")
	entered, release := make(chan struct{}, 1), make(chan struct{})
	sent := make(chan int, 16)
	go func() { // the replicator's outbox loop, with a sink that blocks
		for range st.Outbox() {
			for range st.TakeOutbox() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
				sent <- 1
			}
		}
	}()
	defer close(release)

	if err := st.ReplaceCluster("c1", g, shards("c1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the outbox consumer never started sending")
	}
	// The sink is stuck. Reads and further writes must not wait for it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m := st.Service(echo); m == nil || len(m.Endpoints) != 1 {
			t.Errorf("Service during a stuck publish = %+v", m)
		}
		if err := st.UpdateShard("c1", g, echo, shards("c1", "10.0.0.1", "10.0.0.2")[echo]); err != nil {
			t.Error(err)
		}
		if m := st.Service(echo); m == nil || len(m.Endpoints) != 2 {
			t.Errorf("Service after a write during a stuck publish = %+v", m)
		}
		_ = st.Digest()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Store.Service or UpdateShard blocked while a publish was stuck: a lock is held across the send")
	}
	if n := len(sent); n != 0 {
		t.Fatalf("%d messages got past the stuck sink", n)
	}
}
