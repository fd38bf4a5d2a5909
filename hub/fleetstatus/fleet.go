package fleetstatus

import (
	"context"
	"fmt"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// Proxies is this replica's proxy status as its xDS server tracks it, per
// stream; *xdsstatus.Tracker is one. Its methods may be called
// concurrently and must not block for long.
type Proxies interface {
	// Records returns the record of every proxy connected here.
	Records() []proxystatus.Record
	// TakeChanges returns the records that changed or appeared since the
	// last call, and the node IDs of the proxies that are gone. Fleet is
	// its only caller.
	TakeChanges() (changed []proxystatus.Record, removed []string)
	// Changes signals, coalesced, that TakeChanges has something.
	Changes() <-chan struct{}
}

// Spokes is this replica's spokes, those whose trust-bundle stream it
// holds; *trustsvc.Service is one. Its methods may be called concurrently
// and must not block for long.
type Spokes interface {
	// Spokes returns the local spokes; the caller may keep them.
	Spokes() []debugdoc.Spoke
	// SpokesChanged signals, coalesced, that Spokes changed.
	SpokesChanged() <-chan struct{}
}

// Config is this replica's config ledger, the config epochs its proxies'
// records refer to; *xdsstatus.Ledger is one. Its methods may be called
// concurrently and must not block for long.
type Config interface {
	// ConfigLedger returns the ledger; the caller may keep it.
	ConfigLedger() proxystatus.ConfigLedger
	// Epochs returns the ledger's sealed and pending epochs, a pair that
	// changes whenever the ledger does.
	Epochs() (sealed, pending uint64)
	// Changed signals, coalesced, that the ledger changed.
	Changed() <-chan struct{}
}

// Options configure a Fleet.
type Options struct {
	// Self is this replica.
	Self federation.ReplicaID
	// Proxies is this replica's tracker. Required.
	Proxies Proxies
	// Spokes is this replica's trust-bundle service; nil without a CA.
	Spokes Spokes
	// Config is this replica's config ledger; nil leaves config status
	// out (ConfigStatus reports no object).
	Config Config
}

// Fleet is the fleet-wide status of proxies and spokes: this replica's own,
// taken from its tracker, joined with the records the other replicas send
// over the peer stream. CSDS, /debug/proxy-status and /debug/spokez answer
// from it, so every replica gives the same view within a batch interval.
//
// Fleet is the fleet-status replicator of the peer stream: Full,
// TakeChanges, WaitChanged, Apply and DropReplica are what replication calls
// (replication.ProxyStatusSync); the batch interval is replication's.
// Local changes reach this replica's own view in the same batches that go
// to the peers. A Fleet is safe for concurrent use; its methods do not
// block, and no batch is encoded under a lock that a reader takes.
type Fleet struct {
	self    string
	proxies Proxies
	view    *proxystatus.Fleet // every replica's proxies, this one's included
	spokes  *spokeStatus       // spokes ride along: small, rarely changing, answered fleet-wide too
	// spokesChanged is Options.Spokes' change signal; nil without a CA (a
	// nil channel never fires).
	spokesChanged <-chan struct{}
	config        *ledgers // every replica's config ledger, for ConfigStatus
}

// New returns the Fleet of opts.
func New(opts Options) *Fleet {
	f := &Fleet{
		self: string(opts.Self), proxies: opts.Proxies, view: proxystatus.NewFleet(),
	}
	var local func() []debugdoc.Spoke
	if opts.Spokes != nil {
		local, f.spokesChanged = opts.Spokes.Spokes, opts.Spokes.SpokesChanged()
	}
	f.spokes = newSpokeStatus(f.self, local)
	f.config = newLedgers(f.self, opts.Config)
	return f
}

// WaitChanged blocks until the local proxies, spokes or config ledger
// changed (coalesced: TakeChanges then has something), and reports false
// when ctx ends first. It selects on the sources' own signals, so a change
// wakes no goroutine but the one waiting here.
func (f *Fleet) WaitChanged(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-f.proxies.Changes():
	case <-f.spokesChanged:
	case <-f.config.changed():
	}
	return true
}

// All returns the whole fleet's proxies, sorted (xdsstatus.StatusSource: CSDS;
// /debug/proxy-status).
func (f *Fleet) All() []proxystatus.Record { return f.view.All() }

// Spokes returns every spoke of the fleet at now, merged over the
// replicas (/debug/spokez).
func (f *Fleet) Spokes(now time.Time) debugdoc.Spokez { return f.spokes.all(now) }

// Full returns every local record as a full batch, for a peer that
// (re)connects; nil when there is nothing to say.
func (f *Fleet) Full() []byte {
	recs := f.proxies.Records()
	spokes := f.spokes.full()
	ledger := f.config.full()
	if len(recs) == 0 && len(spokes) == 0 && ledger == nil {
		return nil
	}
	raw, err := batch{Full: true, Changed: recs, Spokes: &spokes, Ledger: ledger}.encode()
	if err != nil {
		return nil
	}
	return raw
}

// TakeChanges moves the local changes into this replica's view and
// returns encode, which builds their batch for the peers; ok is false when
// nothing changed. The replicator calls encode only when a peer is
// connected: a peer that connects later is sent Full, read from the
// proxies after this call, so nothing is lost by not encoding. With one
// replica, that saves building a batch of every proxy's record after every
// push.
func (f *Fleet) TakeChanges() (encode func() ([]byte, error), ok bool) {
	changed, removed := f.proxies.TakeChanges()
	spokes, spokesChanged := f.spokes.take()
	ledger := f.config.take()
	if len(changed) == 0 && len(removed) == 0 && !spokesChanged && ledger == nil {
		return nil, false
	}
	// The records were built for this call: the view keeps them, and the
	// batch only reads them.
	f.view.UpsertOwned(f.self, changed)
	f.view.Remove(f.self, removed)
	b := batch{Changed: changed, Removed: removed, Ledger: ledger}
	if spokesChanged {
		b.Spokes = &spokes
	}
	return b.encode, true
}

// Apply merges a batch of replica from. A record must name its sender as
// replica: a peer cannot speak for another.
func (f *Fleet) Apply(from federation.ReplicaID, raw []byte) error {
	b, err := decodeBatch(raw)
	if err != nil {
		return fmt.Errorf("fleetstatus: batch: %w", err)
	}
	for _, r := range b.Changed {
		if r.Replica != string(from) {
			return fmt.Errorf("fleetstatus: batch from %s carries a record of replica %q", from, r.Replica)
		}
	}
	if b.Spokes != nil {
		f.spokes.apply(string(from), *b.Spokes)
	}
	if b.Ledger != nil {
		f.config.apply(string(from), *b.Ledger)
	}
	if b.Full {
		f.view.Replace(string(from), b.Changed)
		return nil
	}
	f.view.UpsertOwned(string(from), b.Changed)
	f.view.Remove(string(from), b.Removed)
	return nil
}

// DropReplica forgets a departed replica's proxies and spokes: their
// streams are gone with it.
func (f *Fleet) DropReplica(id federation.ReplicaID) {
	f.view.DropReplica(string(id))
	f.spokes.drop(string(id))
	f.config.drop(string(id))
}

// ConfigStatus returns the fleet's config status (/debug/configstatusz):
// each object's rollout to every proxy of every replica, by the ledgers
// the replicas replicate and the fleet's records; or, when q names one
// object, its pending proxies listed. An object that configz (this
// replica's account of the Istio objects) refuses says so,
// with the reason, even when no replica ever applied it.
func (f *Fleet) ConfigStatus(q proxystatus.RolloutQuery, configz debugdoc.Configz) proxystatus.ConfigStatusz {
	doc := proxystatus.Rollouts(f.config.all(), f.view.All(), q)
	refused := func(kind, ns, name string) string {
		if o, ok := configz.Object(kind, ns, name); ok && o.State == debugdoc.ConfigRejected {
			return fmt.Sprintf("generation %d is refused (%s)", o.Generation, o.Reason)
		}
		return ""
	}
	for i := range doc.Objects {
		o := &doc.Objects[i]
		o.Rejected = refused(o.Kind, o.Namespace, o.Name)
	}
	if q.Name != "" && len(doc.Objects) == 0 {
		if why := refused(q.Kind, q.Namespace, q.Name); why != "" {
			doc.Objects = append(doc.Objects, proxystatus.ObjectRollout{Kind: q.Kind, Namespace: q.Namespace, Name: q.Name, Rejected: why})
		}
	}
	return doc
}
