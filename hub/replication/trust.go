package replication

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// trustBundle guards a federation.TrustBundle for concurrent use.
type trustBundle struct {
	mu      sync.Mutex // guards b
	b       *federation.TrustBundle
	changed chan struct{}
}

func (t *trustBundle) notify() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *trustBundle) add(root federation.Root) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.b.Add(root)
	if ok {
		t.notify()
	}
	return ok
}

func (t *trustBundle) remove(fp string, at time.Time, by federation.ReplicaID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.b.Remove(fp, at, by)
	if ok {
		t.notify()
	}
	return ok
}

func (t *trustBundle) merge(st federation.TrustBundleState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.b.Merge(st)
	if ok {
		t.notify()
	}
	return ok
}

func (t *trustBundle) roots(now time.Time) []federation.Root {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Roots(now)
}

// message is the bundle's whole state as a peer message, nil when empty.
func (t *trustBundle) message() *federation.PeerMessage {
	t.mu.Lock()
	st := t.b.State()
	t.mu.Unlock()
	if len(st.Roots) == 0 && len(st.Tombstones) == 0 {
		return nil
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return nil
	}
	return &federation.PeerMessage{Trust: raw}
}
