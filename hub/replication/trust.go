package replication

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// trustBundle guards a federation.TrustBundle for concurrent use.
type trustBundle struct {
	mu sync.Mutex // guards b
	b  *federation.TrustBundle
	// changed is the public signal (TrustChanged); rearm wakes runTimer to
	// look at the bundle's next retirement or expiry again.
	changed, rearm chan struct{}
}

func newTrustBundle() *trustBundle {
	return &trustBundle{b: federation.NewTrustBundle(), changed: make(chan struct{}, 1), rearm: make(chan struct{}, 1)}
}

func (t *trustBundle) notify() {
	for _, c := range []chan struct{}{t.changed, t.rearm} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (t *trustBundle) retire(fp string, at, retireAt time.Time, by federation.ReplicaID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.b.Retire(fp, at, retireAt, by)
	if ok {
		t.notify()
	}
	return ok
}

// tick turns retirements due at now into tombstones and returns when the
// bundle next changes by itself (zero: never). A root that expired or
// retired changes Roots without any write, so it notifies either way when
// called at a deadline.
func (t *trustBundle) tick(now time.Time) (dropped bool, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped = t.b.DropRetired(now)
	return dropped, t.b.NextChange(now)
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
