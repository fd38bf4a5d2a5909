package replication

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerstream"
)

// Trust is the federated trust bundle of this replica: a
// federation.TrustBundle made safe for concurrent use, and its replicator
// (the mux's handler of trust messages). A local change (AddRoot,
// RemoveRoot, RetireRoot, a retirement falling due) marks the bundle for
// sending; Run sends its whole state to every peer after the lock is
// released, several changes in one message. Build it with NewTrust before
// the CA that writes to it and the Replicator that sends it.
type Trust struct {
	self  federation.ReplicaID
	clock clock.WithTicker
	log   logr.Logger
	m     *metrics // set by New; nil until then
	peers *peerstream.Peers

	mu sync.Mutex // guards b
	b  *federation.TrustBundle
	// changed is the public signal (TrustChanged); rearm wakes run to look
	// at the bundle's next retirement or expiry again; send asks run to
	// publish the bundle. All have capacity 1 and coalesce.
	changed, rearm, send chan struct{}
}

// NewTrust returns an empty trust bundle of replica self.
func NewTrust(self federation.ReplicaID, clk clock.WithTicker, log logr.Logger, reg prometheus.Registerer) *Trust {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := &Trust{self: self, clock: clk, log: log, b: federation.NewTrustBundle(),
		changed: make(chan struct{}, 1), rearm: make(chan struct{}, 1), send: make(chan struct{}, 1)}
	t.register(reg)
	return t
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// notify tells readers and the deadline loop that the bundle changed.
func (t *Trust) notify() { signal(t.changed); signal(t.rearm) }

// AddRoot adds a root certificate to the federated trust bundle and
// publishes the bundle; it reports false when a newer removal of the same
// root wins.
func (t *Trust) AddRoot(root federation.Root) bool {
	return t.local(func(b *federation.TrustBundle) bool { return b.Add(root) })
}

// RemoveRoot removes a root from the federated trust bundle (a tombstone,
// so that no late message brings it back) and publishes the bundle.
func (t *Trust) RemoveRoot(fingerprint string) bool {
	now := t.clock.Now()
	return t.local(func(b *federation.TrustBundle) bool { return b.Remove(fingerprint, now, t.self) })
}

// RetireRoot schedules the end of trust in a root of the federated bundle
// at retireAt (federation.TrustBundle.Retire) and publishes the bundle; it
// reports false when the bundle holds no such live root or it already
// retires then.
func (t *Trust) RetireRoot(fingerprint string, retireAt time.Time) bool {
	now := t.clock.Now()
	return t.local(func(b *federation.TrustBundle) bool { return b.Retire(fingerprint, now, retireAt, t.self) })
}

// local applies a local change and, when it changed the bundle, marks it
// for sending.
func (t *Trust) local(change func(*federation.TrustBundle) bool) bool {
	t.mu.Lock()
	ok := change(t.b)
	t.mu.Unlock()
	if ok {
		t.notify()
		signal(t.send)
	}
	return ok
}

// TrustRoots returns the live, unexpired roots of the federated bundle.
func (t *Trust) TrustRoots() []federation.Root {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Roots(t.clock.Now())
}

// TrustChanged signals (coalesced) that the trust bundle changed.
func (t *Trust) TrustChanged() <-chan struct{} { return t.changed }

// run sends the bundle when it changed locally, and wakes at each time the
// bundle changes by itself (a root retiring or expiring): it signals
// TrustChanged so that the streams send the smaller bundle, and turns due
// retirements into tombstones. The waits go through the injected clock.
func (t *Trust) run(ctx context.Context) {
	var timer clock.Timer
	var timerC <-chan time.Time
	arm := func(next time.Time) {
		if timer != nil {
			timer.Stop()
		}
		timer, timerC = nil, nil
		if !next.IsZero() {
			timer = t.clock.NewTimer(max(next.Sub(t.clock.Now()), 0))
			timerC = timer.C()
		}
	}
	defer func() { arm(time.Time{}) }()
	_, next := t.tick()
	arm(next)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.send:
			t.publish()
			continue
		case <-t.rearm:
			_, next = t.tick()
		case <-timerC:
			var dropped bool
			dropped, next = t.tick()
			t.notify()
			if dropped {
				t.publish()
			}
		}
		arm(next)
	}
}

// tick turns retirements due now into tombstones and returns when the
// bundle next changes by itself (zero: never).
func (t *Trust) tick() (dropped bool, next time.Time) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped = t.b.DropRetired(now)
	return dropped, t.b.NextChange(now)
}

// message is the bundle's whole state as a peer message, nil when empty.
// It is encoded with no lock held.
func (t *Trust) message() *federation.PeerMessage {
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

func (t *Trust) publish() {
	m := t.message()
	if m == nil || t.peers == nil {
		return
	}
	if err := t.peers.Broadcast(m); err != nil {
		t.log.V(1).Info("trust bundle broadcast incomplete", "error", err.Error())
	}
}

// Hello implements peerstream.KindHandler: a (re)connecting peer gets the
// whole bundle.
func (t *Trust) Hello(federation.ReplicaID, *federation.Hello) []*federation.PeerMessage {
	if m := t.message(); m != nil {
		return []*federation.PeerMessage{m}
	}
	return nil
}

// Receive implements peerstream.KindHandler: a peer's bundle is merged by
// union (tombstones win over older adds).
func (t *Trust) Receive(from federation.ReplicaID, msg *federation.PeerMessage) {
	var st federation.TrustBundleState
	if err := json.Unmarshal(msg.Trust, &st); err != nil {
		if t.m != nil {
			t.m.rejected.WithLabelValues("trust", "invalid").Inc()
		}
		t.log.Error(err, "trust bundle from peer refused", "peer", from)
		return
	}
	// Only roots that are what they say are merged: a peer must not add
	// a non-CA or mislabelled root to every replica's bundle.
	st, err := st.Verified()
	if err != nil {
		if t.m != nil {
			t.m.rejected.WithLabelValues("trust", "invalid_root").Inc()
		}
		t.log.Error(err, "roots of a peer's trust bundle refused; the rest merged", "peer", from)
	}
	t.mu.Lock()
	ok := t.b.Merge(st)
	t.mu.Unlock()
	if ok {
		t.notify()
		if t.m != nil {
			t.m.applied.WithLabelValues("trust").Inc()
		}
	}
}

// register exports the federated trust bundle, read at scrape time: its
// roots by state, and when the first of them expires (alert on it: an
// expired root breaks every handshake under it).
func (t *Trust) register(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	count := func(retiring bool) func() float64 {
		return func() float64 {
			n := 0
			for _, root := range t.TrustRoots() {
				if !root.RetireAt.IsZero() == retiring {
					n++
				}
			}
			return float64(n)
		}
	}
	for state, retiring := range map[string]bool{"active": false, "retiring": true} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "meshfed_trust_bundle_roots",
			Help:        "Roots of the federated trust bundle, by state: active, or retiring after a rotation.",
			ConstLabels: prometheus.Labels{"state": state},
		}, count(retiring)))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_trust_bundle_first_expiry_timestamp_seconds",
		Help: "When the first root of the federated trust bundle expires (Unix time); 0 when the bundle is empty.",
	}, func() float64 {
		var first float64
		for _, root := range t.TrustRoots() {
			if ts := float64(root.NotAfter.Unix()); !root.NotAfter.IsZero() && (first == 0 || ts < first) {
				first = ts
			}
		}
		return first
	}))
}
