package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

// Options configure a Store.
type Options struct {
	// Self is this replica, the owner of its local writes.
	Self  federation.ReplicaID
	Clock clock.PassiveClock
}

// Store is the hub's registry of every remote cluster's services.
//
// Local writes never leave the store under its lock: each accepted one
// appends the message that tells the other replicas to the outbox, and the
// replicator takes it from there (Outbox, TakeOutbox) to encode and send
// after the lock is released. So a slow peer or a large snapshot never
// holds up an xDS read of Service.
type Store struct {
	opts Options

	mu    sync.Mutex // guards reg, state, writers, lastGen, dirty and outbox
	reg   *model.Registry
	state *federation.State
	// writers holds, per cluster a local watcher writes, that watcher's
	// generation and the term it writes under.
	writers map[model.ClusterID]writer
	// lastGen is the last generation handed to a local watcher.
	lastGen model.Generation
	dirty   map[model.Hostname]struct{}
	outbox  []*federation.PeerMessage

	// changed and outboxReady have capacity 1: a pending signal stands for
	// any number of writes since the consumer last took them.
	changed, outboxReady chan struct{}
}

// writer is the local watcher of one cluster.
type writer struct {
	gen  model.Generation
	term uint64
}

// New returns an empty store.
func New(opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	reg := model.NewRegistry()
	return &Store{
		opts:        opts,
		reg:         reg,
		state:       federation.NewState(reg),
		writers:     map[model.ClusterID]writer{},
		dirty:       map[model.Hostname]struct{}{},
		changed:     make(chan struct{}, 1),
		outboxReady: make(chan struct{}, 1),
	}
}

// NextGeneration starts a local watcher of cluster c: it returns the
// generation the watcher writes with, and supersedes every earlier local
// watcher of c. The watcher's writes go out under a term higher than any
// this replica has seen for c (federation.State.NextTerm), so its snapshot
// supersedes the previous owner's. A replica that never saw an earlier
// incarnation of c (removed, then added again) may pick a term the others
// hold a tombstone of; they refuse it and say so (Superseded), and the
// store republishes under a higher term. No clock is read: terms only
// count.
func (s *Store) NextGeneration(c model.ClusterID) model.Generation {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastGen++
	term := s.state.NextTerm(c)
	s.state.Observe(c, term) // reserved: the next watcher goes higher
	s.writers[c] = writer{gen: s.lastGen, term: term}
	return s.lastGen
}

// ReplaceCluster publishes the whole state of cluster c as listed by this
// replica's watcher of generation gen. It fails with an error wrapping
// model.ErrStaleGeneration when a newer local watcher replaced it, the
// cluster was removed, or another owner has superseded it.
func (s *Store) ReplaceCluster(c model.ClusterID, gen model.Generation, shards map[model.Hostname]*model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.writerLocked(c, gen)
	if err != nil {
		return err
	}
	snap, changed, err := s.state.LocalSnapshot(c, s.opts.Self, w.term, shards, s.opts.Clock.Now())
	if err != nil {
		return stale(err)
	}
	s.markLocked(changed...)
	s.sendLocked(&federation.PeerMessage{Snapshot: &snap})
	return nil
}

// UpdateShard publishes cluster c's shard of hostname h; a nil shard
// deletes it.
func (s *Store) UpdateShard(c model.ClusterID, gen model.Generation, h model.Hostname, shard *model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.writerLocked(c, gen)
	if err != nil {
		return err
	}
	delta, changed, err := s.state.LocalDelta(c, s.opts.Self, w.term, h, shard, s.opts.Clock.Now())
	if err != nil {
		return stale(err)
	}
	if changed {
		s.markLocked(h)
		s.sendLocked(&federation.PeerMessage{Delta: &delta})
	}
	return nil
}

// writerLocked returns the local writer of c if it has generation gen.
func (s *Store) writerLocked(c model.ClusterID, gen model.Generation) (writer, error) {
	w, ok := s.writers[c]
	switch {
	case !ok:
		return writer{}, fmt.Errorf("cluster %s: no local watcher (removed): %w", c, model.ErrStaleGeneration)
	case w.gen != gen:
		return writer{}, fmt.Errorf("cluster %s: watcher generation %d replaced by %d: %w", c, gen, w.gen, model.ErrStaleGeneration)
	}
	return w, nil
}

// Superseded tells the store that a peer refused a write of cluster c
// because it holds tombstone, the version c had when it was removed (the
// peer's refusal was ErrRemoved). When tombstone is not older than the
// term this replica writes c under, the local watcher's state is
// published again, as a snapshot under a term above the tombstone: a
// replica that never saw the removed incarnation catches up in one round
// trip. It reports whether it republished.
func (s *Store) Superseded(c model.ClusterID, tombstone federation.Version) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Observe(c, tombstone.Term)
	w, ok := s.writers[c]
	if !ok || w.term > tombstone.Term {
		return false
	}
	w.term = s.state.NextTerm(c)
	s.state.Observe(c, w.term)
	s.writers[c] = w
	cur, held := s.state.Version(c)
	if !held || cur.Owner != s.opts.Self {
		return false // not published yet: the watcher's snapshot takes the new term
	}
	shards := s.reg.ClusterShards(c)
	snap, changed, err := s.state.LocalSnapshot(c, s.opts.Self, w.term, shards, s.opts.Clock.Now())
	if err != nil {
		return false
	}
	s.markLocked(changed...)
	s.sendLocked(&federation.PeerMessage{Snapshot: &snap})
	return true
}

// stale marks a refused local write as coming from a superseded watcher.
func stale(err error) error {
	if errors.Is(err, model.ErrStaleGeneration) {
		return err
	}
	return fmt.Errorf("%w: %w", model.ErrStaleGeneration, err)
}

// sendLocked appends m to the outbox. The store's lock is held, so nothing
// is encoded or sent here.
func (s *Store) sendLocked(m *federation.PeerMessage) {
	s.outbox = append(s.outbox, m)
	select {
	case s.outboxReady <- struct{}{}:
	default:
	}
}

// Outbox signals (coalesced) that TakeOutbox has messages. There must be a
// single consumer.
func (s *Store) Outbox() <-chan struct{} { return s.outboxReady }

// TakeOutbox returns, in write order, the messages of the local writes
// since the last call, for the consumer to send to every peer after the
// call returns. Sending them in this order keeps each cluster's deltas
// behind the snapshot they apply on.
func (s *Store) TakeOutbox() []*federation.PeerMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.outbox
	s.outbox = nil
	return out
}

// ApplySnapshot applies a peer's snapshot (see federation.State).
func (s *Store) ApplySnapshot(snap federation.ClusterSnapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.state.ApplySnapshot(snap)
	s.markLocked(changed...)
	return err
}

// ApplyDelta applies a peer's delta (see federation.State).
func (s *Store) ApplyDelta(d federation.ShardDelta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.state.ApplyDelta(d)
	if changed {
		s.markLocked(d.Hostname)
	}
	return err
}

// RemoveCluster drops every shard of cluster c: its remote secret is gone.
// A local watcher of c is superseded.
func (s *Store) RemoveCluster(c model.ClusterID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.writers, c)
	s.markLocked(s.state.Remove(c)...)
}

// Tombstone returns the version cluster c had when it was removed here, if
// it was and has not been added again since.
func (s *Store) Tombstone(c model.ClusterID) (federation.Version, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Tombstone(c)
}

// Digest returns the version of every cluster held.
func (s *Store) Digest() federation.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Digest()
}

// Behind returns the clusters on which remote is ahead of this store.
func (s *Store) Behind(remote federation.Digest) []model.ClusterID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Behind(remote)
}

// Snapshots returns the current state of each of clusters that this store
// holds, for a peer's catch-up.
func (s *Store) Snapshots(clusters []model.ClusterID) []federation.ClusterSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	var out []federation.ClusterSnapshot
	for _, c := range clusters {
		if snap, ok := s.state.Snapshot(c, now); ok {
			out = append(out, snap)
		}
	}
	return out
}

// AheadOf returns the clusters on which this store is ahead of remote.
func (s *Store) AheadOf(remote federation.Digest) []model.ClusterID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []model.ClusterID
	for c, v := range s.state.Digest() {
		if rv, ok := remote[c]; !ok || rv.Compare(v) < 0 {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Version returns the version of cluster c's state, if held.
func (s *Store) Version(c model.ClusterID) (federation.Version, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Version(c)
}

func (s *Store) markLocked(hs ...model.Hostname) {
	if len(hs) == 0 {
		return
	}
	for _, h := range hs {
		s.dirty[h] = struct{}{}
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Changed signals that TakeChanged has something to return. There must be
// a single consumer.
func (s *Store) Changed() <-chan struct{} { return s.changed }

// TakeChanged returns, sorted, the hostnames changed since the last call.
func (s *Store) TakeChanged() []model.Hostname {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Sorted(maps.Keys(s.dirty))
	clear(s.dirty)
	return out
}

// Service returns the merged view of hostname h, or nil.
func (s *Store) Service(h model.Hostname) *model.MergedService {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.Service(h)
}

// Services returns the merged view of every hostname, sorted by hostname.
func (s *Store) Services() []*model.MergedService {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := s.reg.Hostnames()
	out := make([]*model.MergedService, 0, len(hs))
	for _, h := range hs {
		out = append(out, s.reg.Service(h))
	}
	return out
}

// NetworkGateways returns the fleet's networks and their gateways
// (model.Registry.NetworkGateways).
func (s *Store) NetworkGateways() *model.NetworkGateways {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.NetworkGateways()
}

// ClusterNetwork returns cluster c's network ("" when unknown).
func (s *Store) ClusterNetwork(c model.ClusterID) model.Network {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.ClusterNetwork(c)
}

// ClusterSummary is what the store holds of one cluster.
type ClusterSummary struct {
	model.ClusterSummary
	// Version is the version of the cluster's state (its Term counts the
	// owners' syncs of it).
	Version federation.Version
}

// Clusters summarises what the store holds per cluster, sorted by ID.
func (s *Store) Clusters() []ClusterSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sums := s.reg.Clusters()
	out := make([]ClusterSummary, len(sums))
	for i, sum := range sums {
		v, _ := s.state.Version(sum.ID)
		out[i] = ClusterSummary{ClusterSummary: sum, Version: v}
	}
	return out
}

// HasCluster reports whether the state of cluster c is held.
func (s *Store) HasCluster(c model.ClusterID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.HasCluster(c)
}
