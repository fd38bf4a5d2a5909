package replication

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

// Options configure a Replicator.
type Options struct {
	Self federation.ReplicaID
	// WatchReplicas is how many live replicas watch each remote cluster.
	WatchReplicas int

	// GossipAddr is memberlist's bind address; Join lists seeds.
	GossipAddr, GossipAdvertiseAddr string
	Join                            []string
	// GossipKey encrypts gossip; nil leaves it in plaintext.
	GossipKey []byte

	// PeerAddr is the peer gRPC listen address, PeerAdvertiseAddr the
	// address other replicas dial (default PeerAddr).
	PeerAddr, PeerAdvertiseAddr string
	ServerTLS, ClientTLS        *tls.Config

	// PeerConnectGrace is how long a gossip member may stay without a peer
	// stream before it is set aside as suspect. Only one side of a pair
	// dials, so a replica that joins after a peer died never sees that
	// peer's stream break, and would otherwise count it as an owner until
	// gossip declares it dead (seconds). Default 1s: a stream comes up in
	// milliseconds.
	PeerConnectGrace time.Duration

	Log     logr.Logger
	Metrics prometheus.Registerer
	Clock   clock.PassiveClock
}

// Replicator connects this hub replica to the others.
type Replicator struct {
	opts       Options
	store      *store.Store
	trust      *trustBundle
	proxies    ProxyStatusSync
	membership *federation.Membership
	peers      *federation.Peers
	own        *ownership
	m          *metrics

	departMu sync.Mutex // guards seen
	seen     map[federation.ReplicaID]bool

	// unconnected holds, per member without a peer stream, since when
	// (checkUnconnected's; only its goroutine touches it).
	unconnected map[federation.ReplicaID]time.Time
}

// New creates a Replicator for st. Call SetStore before Run if st is nil
// at construction time (the store publishes through the Replicator).
func New(opts Options) (*Replicator, error) {
	if opts.WatchReplicas < 1 {
		opts.WatchReplicas = 1
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PeerAdvertiseAddr == "" {
		opts.PeerAdvertiseAddr = opts.PeerAddr
	}
	if opts.PeerConnectGrace == 0 {
		opts.PeerConnectGrace = time.Second
	}
	r := &Replicator{
		opts: opts, own: newOwnership(opts.Self, opts.WatchReplicas), m: newMetrics(opts.Metrics),
		trust: newTrustBundle(), unconnected: map[federation.ReplicaID]time.Time{},
	}
	var err error
	r.peers, err = federation.NewPeers(federation.PeerOptions{
		Self: opts.Self, ListenAddr: opts.PeerAddr,
		TLS: opts.ServerTLS, ClientTLS: opts.ClientTLS,
		Handler: r, LocalDigest: r.digest,
		Log: opts.Log.WithName("peers"), Metrics: opts.Metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r.peers.OnPeerDown(r.peerDown)
	r.registerOwned(opts.Metrics)
	r.registerTrust(opts.Metrics)
	r.membership, err = federation.NewMembership(federation.MembershipOptions{
		ReplicaID: opts.Self, BindAddr: opts.GossipAddr, AdvertiseAddr: opts.GossipAdvertiseAddr,
		Join: opts.Join, Key: opts.GossipKey, PeerAddr: opts.PeerAdvertiseAddr,
		LocalState: r.digest, MergeState: r.mergeDigest,
		Log: opts.Log.WithName("gossip"), Metrics: opts.Metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	return r, nil
}

// ProxyStatusSync is the proxy-status component as the Replicator sees it:
// opaque batches of records, this replica's going out, the others' coming
// in. Implementations must be safe for concurrent use and must not block.
type ProxyStatusSync interface {
	// Full returns every local record, for a peer that (re)connects.
	Full() json.RawMessage
	// TakeChanges returns the local changes since the last call, if any.
	TakeChanges() (json.RawMessage, bool)
	// Changed signals (coalesced) that TakeChanges has something.
	Changed() <-chan struct{}
	// Apply merges a batch from replica from.
	Apply(from federation.ReplicaID, batch json.RawMessage) error
	// DropReplica forgets every record of a replica that left.
	DropReplica(id federation.ReplicaID)
}

// SetProxyStatus makes the Replicator replicate proxy-status records. It
// must be called before Run.
func (r *Replicator) SetProxyStatus(p ProxyStatusSync) { r.proxies = p }

// proxyStatusBatchInterval bounds how often local proxy-status changes are
// sent: changes within it travel in one batch, so 10k proxies acking a push
// cost a few messages, not 10k.
const proxyStatusBatchInterval = 250 * time.Millisecond

// runProxyStatus publishes local proxy-status changes in batches.
func (r *Replicator) runProxyStatus(ctx context.Context) {
	if r.proxies == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.proxies.Changed():
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(proxyStatusBatchInterval):
		}
		if batch, ok := r.proxies.TakeChanges(); ok {
			r.Publish(&federation.PeerMessage{ProxyStatus: batch})
		}
	}
}

// runOutbox sends the store's local writes to every peer, in write order.
// It runs apart from the writers: the store appends under its lock, and
// only this goroutine encodes and queues, with no store lock held.
func (r *Replicator) runOutbox(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.store.Outbox():
		}
		for _, m := range r.store.TakeOutbox() {
			r.Publish(m)
		}
	}
}

// SetStore gives the Replicator the store it replicates. It must be called
// once, before Run.
func (r *Replicator) SetStore(st *store.Store) { r.store = st }

// Publish sends a local write to every peer. It does not block.
func (r *Replicator) Publish(msg *federation.PeerMessage) {
	if err := r.peers.Broadcast(msg); err != nil {
		r.opts.Log.V(1).Info("broadcast incomplete", "error", err.Error())
	}
	r.m.published.Inc()
}

// Ownership returns which clusters this replica watches.
func (r *Replicator) Ownership() *ownership { return r.own }

// Run runs membership and the peer transport until ctx ends; then it
// leaves the gossip gracefully so the others take over at once.
func (r *Replicator) Run(ctx context.Context) error {
	if r.store == nil {
		return errors.New("replication: Run without a store")
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.peers.Run(ctx) })
	g.Go(func() error { return r.membership.Run(ctx) })
	g.Go(func() error { r.runOutbox(ctx); return nil })
	g.Go(func() error { r.runProxyStatus(ctx); return nil })
	g.Go(func() error { r.runTrustDeadlines(ctx); return nil })
	g.Go(func() error { r.runConnectCheck(ctx); return nil })
	g.Go(func() error {
		r.onMembers()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-r.membership.Changed():
				r.onMembers()
			}
		}
	})
	return g.Wait()
}

// onMembers brings ownership and peer connections in line with the live
// members.
func (r *Replicator) onMembers() {
	members := r.membership.Members()
	ids := make([]federation.ReplicaID, 0, len(members))
	peers := map[federation.ReplicaID]string{}
	for _, m := range members {
		ids = append(ids, m.ID)
		if m.ID != r.opts.Self && m.PeerAddr != "" {
			peers[m.ID] = m.PeerAddr
		}
	}
	r.peers.SetPeers(peers)
	r.setMembers(ids)
	r.dropDeparted(ids)
}

// dropDeparted forgets the proxy status of replicas no longer members:
// their proxies have reconnected elsewhere, or are gone.
func (r *Replicator) dropDeparted(ids []federation.ReplicaID) {
	if r.proxies == nil {
		return
	}
	r.departMu.Lock()
	defer r.departMu.Unlock()
	now := map[federation.ReplicaID]bool{}
	for _, id := range ids {
		now[id] = true
	}
	for id := range r.seen {
		if !now[id] {
			r.proxies.DropReplica(id)
		}
	}
	r.seen = now
}

func (r *Replicator) setMembers(ids []federation.ReplicaID) {
	var clusters []model.ClusterID
	if r.store != nil {
		clusters = slices.Collect(maps.Keys(r.store.Digest()))
	}
	moved := r.own.setMembers(ids, clusters)
	r.m.moves.Add(float64(moved))
	r.m.members.Set(float64(len(ids)))
}

// runConnectCheck sets aside, every quarter of the grace, the members that
// have had no peer stream for PeerConnectGrace.
func (r *Replicator) runConnectCheck(ctx context.Context) {
	t := time.NewTicker(r.opts.PeerConnectGrace / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.checkUnconnected(r.opts.Clock.Now())
		}
	}
}

// checkUnconnected suspects the live members without a peer stream since
// PeerConnectGrace before now. A suspect that connects is taken back by
// PeerHello.
func (r *Replicator) checkUnconnected(now time.Time) {
	connected := map[federation.ReplicaID]bool{}
	for _, id := range r.peers.Connected() {
		connected[id] = true
	}
	live := map[federation.ReplicaID]bool{}
	changed := false
	for _, m := range r.membership.Members() {
		id := m.ID
		live[id] = true
		if id == r.opts.Self || connected[id] {
			delete(r.unconnected, id)
			continue
		}
		since, ok := r.unconnected[id]
		if !ok {
			r.unconnected[id] = now
			continue
		}
		if now.Sub(since) >= r.opts.PeerConnectGrace && r.own.suspect(id, true) {
			r.opts.Log.Info("no peer stream with a member; treating it as suspect", "peer", id, "since", since)
			changed = true
		}
	}
	for id := range r.unconnected {
		if !live[id] {
			delete(r.unconnected, id)
		}
	}
	if changed {
		r.setMembers(r.own.liveMembers())
	}
}

// peerDown sets a peer aside as suspect: its clusters move now rather than
// when gossip declares it dead.
func (r *Replicator) peerDown(id federation.ReplicaID) {
	r.opts.Log.Info("peer stream broke; treating peer as suspect", "peer", id)
	if r.own.suspect(id, true) {
		r.setMembers(r.own.liveMembers())
	}
}

func (r *Replicator) digest() federation.Digest {
	if r.store == nil {
		return federation.Digest{}
	}
	return r.store.Digest()
}

// mergeDigest is memberlist's push/pull: ask the peer for what it is
// ahead on.
func (r *Replicator) mergeDigest(from federation.ReplicaID, d federation.Digest) {
	if r.store == nil {
		return
	}
	if behind := r.store.Behind(d); len(behind) > 0 {
		r.resync(from, behind, "gossip digest")
	}
}

func (r *Replicator) resync(from federation.ReplicaID, clusters []model.ClusterID, why string) {
	r.m.resyncs.WithLabelValues(why).Inc()
	if err := r.peers.Send(from, &federation.PeerMessage{Resync: clusters}); err != nil {
		r.opts.Log.V(1).Info("cannot ask peer for snapshots", "peer", from, "clusters", clusters, "error", err.Error())
	}
}

// PeerHello implements federation.PeerHandler: a peer (re)connected; send
// it every cluster it is behind on. A suspect that is back is taken back.
func (r *Replicator) PeerHello(from federation.ReplicaID, digest federation.Digest) []*federation.PeerMessage {
	if r.own.suspect(from, false) {
		r.setMembers(r.own.liveMembers())
	}
	if r.store == nil {
		return nil
	}
	snaps := r.store.Snapshots(r.catchUp(from, r.store.AheadOf(digest)))
	out := make([]*federation.PeerMessage, 0, len(snaps)+1)
	for i := range snaps {
		out = append(out, &federation.PeerMessage{Snapshot: &snaps[i]})
	}
	if m := r.trust.message(); m != nil {
		out = append(out, m)
	}
	if r.proxies != nil {
		if full := r.proxies.Full(); len(full) > 0 {
			out = append(out, &federation.PeerMessage{ProxyStatus: full})
		}
	}
	return out
}

// catchUp picks, of the clusters a (re)connecting peer is behind on, those
// this replica sends it: the ones it wrote itself, and the ones whose
// writer has no stream with this replica (gone, or not connected yet).
// Every replica holds the same snapshots, so without this a replica that
// joins a fleet of N would be sent each cluster N-1 times and drop all
// but one; the writer's own Hello exchange with the joiner brings the
// rest, and the gossip digests repair whatever slips through.
func (r *Replicator) catchUp(from federation.ReplicaID, behind []model.ClusterID) []model.ClusterID {
	connected := map[federation.ReplicaID]bool{}
	for _, id := range r.peers.Connected() {
		connected[id] = true
	}
	var out []model.ClusterID
	for _, c := range behind {
		v, ok := r.store.Version(c)
		if !ok {
			continue
		}
		if v.Owner == r.opts.Self || v.Owner == from || !connected[v.Owner] {
			out = append(out, c)
		}
	}
	return out
}

// PeerMessage implements federation.PeerHandler.
func (r *Replicator) PeerMessage(from federation.ReplicaID, msg *federation.PeerMessage) {
	if r.store == nil {
		return
	}
	now := r.opts.Clock.Now()
	switch {
	case msg.Snapshot != nil:
		err := r.store.ApplySnapshot(*msg.Snapshot)
		r.account("snapshot", err, now.Sub(msg.Snapshot.Sent))
		r.answerRemoved(from, msg.Snapshot.Cluster, msg.Snapshot.Version, err)
	case msg.Delta != nil:
		err := r.store.ApplyDelta(*msg.Delta)
		r.account("delta", err, now.Sub(msg.Delta.Sent))
		r.answerRemoved(from, msg.Delta.Cluster, msg.Delta.Version, err)
		if errors.Is(err, federation.ErrGap) {
			r.resync(from, []model.ClusterID{msg.Delta.Cluster}, "gap")
		}
	case msg.Superseded != nil:
		if r.store.Superseded(msg.Superseded.Cluster, msg.Superseded.Version) {
			r.opts.Log.Info("a peer holds a tombstone of a cluster this replica writes; republished above it",
				"peer", from, "cluster", msg.Superseded.Cluster, "tombstone", msg.Superseded.Version.String())
		}
	case len(msg.Trust) > 0:
		var st federation.TrustBundleState
		if err := json.Unmarshal(msg.Trust, &st); err != nil {
			r.m.rejected.WithLabelValues("trust", "invalid").Inc()
			r.opts.Log.Error(err, "trust bundle from peer refused", "peer", from)
			return
		}
		if r.trust.merge(st) {
			r.m.applied.WithLabelValues("trust").Inc()
		}
	case len(msg.ProxyStatus) > 0:
		if r.proxies == nil {
			return
		}
		if err := r.proxies.Apply(from, msg.ProxyStatus); err != nil {
			r.m.rejected.WithLabelValues("proxy_status", "invalid").Inc()
			r.opts.Log.Error(err, "proxy status from peer refused", "peer", from)
			return
		}
		r.m.applied.WithLabelValues("proxy_status").Inc()
	case len(msg.Resync) > 0:
		for _, snap := range r.store.Snapshots(msg.Resync) {
			if err := r.peers.Send(from, &federation.PeerMessage{Snapshot: &snap}); err != nil {
				r.opts.Log.V(1).Info("cannot send snapshot", "peer", from, "cluster", snap.Cluster, "error", err.Error())
				return
			}
		}
	}
}

// answerRemoved tells the writer of a refused write that this replica
// holds a tombstone of its cluster, so that a writer of the cluster's new
// incarnation (one that never saw the removal) moves above it. Only the
// writer itself is answered: a snapshot forwarded in a catch-up is not
// its sender's to fix.
func (r *Replicator) answerRemoved(from federation.ReplicaID, c model.ClusterID, v federation.Version, err error) {
	if !errors.Is(err, federation.ErrRemoved) || v.Owner != from {
		return
	}
	tomb, ok := r.store.Tombstone(c)
	if !ok {
		return
	}
	if err := r.peers.Send(from, &federation.PeerMessage{Superseded: &federation.ClusterTombstone{Cluster: c, Version: tomb}}); err != nil {
		r.opts.Log.V(1).Info("cannot tell the writer of its cluster's tombstone", "peer", from, "cluster", c, "error", err.Error())
	}
}

// account counts an applied (or refused) replicated write.
func (r *Replicator) account(kind string, err error, lag time.Duration) {
	switch {
	case err == nil:
		r.m.applied.WithLabelValues(kind).Inc()
		r.m.lag.Observe(lag.Seconds())
	case errors.Is(err, federation.ErrDuplicate):
		r.m.rejected.WithLabelValues(kind, "duplicate").Inc()
	case errors.Is(err, federation.ErrStale):
		r.m.rejected.WithLabelValues(kind, "stale").Inc()
	case errors.Is(err, federation.ErrGap):
		r.m.rejected.WithLabelValues(kind, "gap").Inc()
	case errors.Is(err, federation.ErrRemoved):
		r.m.rejected.WithLabelValues(kind, "removed").Inc()
	default:
		r.m.rejected.WithLabelValues(kind, "invalid").Inc()
		r.opts.Log.Error(err, "replicated write refused", "kind", kind)
	}
}

// AddRoot adds a root certificate to the federated trust bundle and
// publishes the bundle; it reports false when a newer removal of the same
// root wins.
func (r *Replicator) AddRoot(root federation.Root) bool {
	if !r.trust.add(root) {
		return false
	}
	r.publishTrust()
	return true
}

// RemoveRoot removes a root from the federated trust bundle (a tombstone,
// so that no late message brings it back) and publishes the bundle.
func (r *Replicator) RemoveRoot(fingerprint string) bool {
	if !r.trust.remove(fingerprint, r.opts.Clock.Now(), r.opts.Self) {
		return false
	}
	r.publishTrust()
	return true
}

// RetireRoot schedules the end of trust in a root of the federated bundle
// at retireAt (federation.TrustBundle.Retire) and publishes the bundle; it
// reports false when the bundle holds no such live root or it already
// retires then.
func (r *Replicator) RetireRoot(fingerprint string, retireAt time.Time) bool {
	if !r.trust.retire(fingerprint, r.opts.Clock.Now(), retireAt, r.opts.Self) {
		return false
	}
	r.publishTrust()
	return true
}

// runTrustDeadlines wakes at each time the bundle changes by itself, a root
// retiring or expiring: it signals TrustChanged so that the streams send
// the smaller bundle, and turns due retirements into tombstones.
func (r *Replicator) runTrustDeadlines(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	arm := func(next time.Time) {
		timer.Stop()
		if !next.IsZero() {
			// Clock is passive: the deadline is turned into a real wait.
			timer.Reset(max(next.Sub(r.opts.Clock.Now()), 0))
		}
	}
	_, next := r.trust.tick(r.opts.Clock.Now())
	arm(next)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.trust.rearm:
			_, next = r.trust.tick(r.opts.Clock.Now())
		case <-timer.C:
			var dropped bool
			dropped, next = r.trust.tick(r.opts.Clock.Now())
			r.trust.notify()
			if dropped {
				r.publishTrust()
			}
		}
		arm(next)
	}
}

// TrustRoots returns the live, unexpired roots of the federated bundle.
func (r *Replicator) TrustRoots() []federation.Root { return r.trust.roots(r.opts.Clock.Now()) }

// TrustChanged signals (coalesced) that the trust bundle changed.
func (r *Replicator) TrustChanged() <-chan struct{} { return r.trust.changed }

func (r *Replicator) publishTrust() {
	if m := r.trust.message(); m != nil {
		r.Publish(m)
	}
}

// Federationz is the JSON document of /debug/federationz.
type Federationz struct {
	Self          federation.ReplicaID   `json:"self"`
	WatchReplicas int                    `json:"watchReplicas"`
	Members       []FederationzMember    `json:"members"`
	Clusters      []FederationzCluster   `json:"clusters"`
	Suspects      []federation.ReplicaID `json:"suspects,omitempty"`
}

// FederationzMember is one live member.
type FederationzMember struct {
	ID         federation.ReplicaID `json:"id"`
	GossipAddr string               `json:"gossipAddr"`
	PeerAddr   string               `json:"peerAddr"`
	Connected  bool                 `json:"connected"`
}

// FederationzCluster is one cluster's owners and state version here.
type FederationzCluster struct {
	ID      model.ClusterID        `json:"id"`
	Owners  []federation.ReplicaID `json:"owners"`
	Version federation.Version     `json:"version"`
}

// Federationz reports members, owners per cluster and state versions.
func (r *Replicator) Federationz() Federationz {
	out := Federationz{Self: r.opts.Self, WatchReplicas: r.opts.WatchReplicas, Suspects: r.own.suspects()}
	connected := map[federation.ReplicaID]bool{}
	for _, id := range r.peers.Connected() {
		connected[id] = true
	}
	for _, m := range r.membership.Members() {
		out.Members = append(out.Members, FederationzMember{
			ID: m.ID, GossipAddr: m.GossipAddr, PeerAddr: m.PeerAddr, Connected: connected[m.ID] || m.ID == r.opts.Self,
		})
	}
	digest := r.digest()
	for _, c := range slices.Sorted(maps.Keys(digest)) {
		out.Clusters = append(out.Clusters, FederationzCluster{ID: c, Owners: r.own.owners(c), Version: digest[c]})
	}
	return out
}
