package fleetstatus

import (
	"cmp"
	"slices"
	"sync"

	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// ledgers is the fleet's config ledgers: this replica's own, read from
// its xDS server (Options.Config), and those the other replicas send in
// their batches. A ledger travels whole when it changes, which is at each
// configuration push: it is one small entry per config object. Safe for
// concurrent use.
type ledgers struct {
	self  string
	local Config // nil: no config status

	mu       sync.Mutex // guards peers and sent; no call out under it
	peers    map[string]proxystatus.ConfigLedger
	sent     [2]uint64 // Epochs of the local ledger last sent
	sentOnce bool
}

func newLedgers(self string, local Config) *ledgers {
	return &ledgers{self: self, local: local, peers: map[string]proxystatus.ConfigLedger{}}
}

// changed is the local ledger's change signal; nil (never ready) without
// one.
func (l *ledgers) changed() <-chan struct{} {
	if l.local == nil {
		return nil
	}
	return l.local.Changed()
}

// full returns the local ledger for a full batch, nil without one.
func (l *ledgers) full() *proxystatus.ConfigLedger {
	if l.local == nil {
		return nil
	}
	sealed, pending := l.local.Epochs()
	out := l.local.ConfigLedger()
	l.mu.Lock()
	l.sent, l.sentOnce = [2]uint64{sealed, pending}, true
	l.mu.Unlock()
	return &out
}

// take returns the local ledger if it changed since it was last sent.
func (l *ledgers) take() *proxystatus.ConfigLedger {
	if l.local == nil {
		return nil
	}
	sealed, pending := l.local.Epochs()
	l.mu.Lock()
	same := l.sentOnce && l.sent == [2]uint64{sealed, pending}
	l.mu.Unlock()
	if same {
		return nil
	}
	return l.full()
}

// apply replaces the ledger of replica from.
func (l *ledgers) apply(from string, led proxystatus.ConfigLedger) {
	led.Replica = from
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peers[from] = led
}

// drop forgets a departed replica's ledger.
func (l *ledgers) drop(replica string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.peers, replica)
}

// all returns every replica's ledger, this one's read now, sorted by
// replica.
func (l *ledgers) all() []proxystatus.ConfigLedger {
	var out []proxystatus.ConfigLedger
	if l.local != nil {
		led := l.local.ConfigLedger()
		led.Replica = l.self
		out = append(out, led)
	}
	l.mu.Lock()
	for r, led := range l.peers {
		if r != l.self {
			out = append(out, led)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b proxystatus.ConfigLedger) int { return cmp.Compare(a.Replica, b.Replica) })
	return out
}
