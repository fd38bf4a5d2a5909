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
	Self federation.ReplicaID
	// Publish receives every local write to send to the other replicas. It
	// is called with the store's lock held, in write order, and must not
	// block (enqueue). Nil publishes nothing.
	Publish func(*federation.PeerMessage)
	Clock   clock.PassiveClock
}

// Store is the hub's registry of every remote cluster's services.
type Store struct {
	opts Options

	mu    sync.Mutex // guards reg, state and dirty
	reg   *model.Registry
	state *federation.State
	dirty map[model.Hostname]struct{}

	// changed has capacity 1: a pending signal stands for any number of
	// writes since the consumer last called TakeChanged.
	changed chan struct{}
}

// New returns an empty store.
func New(opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	reg := model.NewRegistry()
	return &Store{
		opts:    opts,
		reg:     reg,
		state:   federation.NewState(reg),
		dirty:   map[model.Hostname]struct{}{},
		changed: make(chan struct{}, 1),
	}
}

// NextGeneration returns the term under which a new watcher of cluster c
// writes: higher than any this replica has seen for c, so its snapshot
// supersedes the previous owner's, and not lower than the clock in
// milliseconds. The clock floor matters when a cluster is removed and
// added again and its new owner is a replica that never saw it before:
// the others keep the removed incarnation's term as a tombstone and refuse
// anything not newer, and a term counted from 1 would be refused for as
// long as that replica owns the cluster. A term taken from the clock is
// newer than the removal (unless the replicas' clocks disagree by more
// than the time between removal and re-adding).
func (s *Store) NextGeneration(c model.ClusterID) model.Generation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return model.Generation(max(s.state.NextTerm(c), uint64(max(s.opts.Clock.Now().UnixMilli(), 0))))
}

// ReplaceCluster publishes the whole state of cluster c as listed by this
// replica's watcher of generation gen. It fails with an error wrapping
// model.ErrStaleGeneration when another owner has superseded it.
func (s *Store) ReplaceCluster(c model.ClusterID, gen model.Generation, shards map[model.Hostname]*model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, changed, err := s.state.LocalSnapshot(c, s.opts.Self, uint64(gen), shards, s.opts.Clock.Now())
	if err != nil {
		return stale(err)
	}
	s.markLocked(changed...)
	s.publishLocked(&federation.PeerMessage{Snapshot: &snap})
	return nil
}

// UpdateShard publishes cluster c's shard of hostname h; a nil shard
// deletes it.
func (s *Store) UpdateShard(c model.ClusterID, gen model.Generation, h model.Hostname, shard *model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delta, changed, err := s.state.LocalDelta(c, s.opts.Self, uint64(gen), h, shard, s.opts.Clock.Now())
	if err != nil {
		return stale(err)
	}
	if changed {
		s.markLocked(h)
		s.publishLocked(&federation.PeerMessage{Delta: &delta})
	}
	return nil
}

// stale marks a refused local write as coming from a superseded watcher.
func stale(err error) error {
	if errors.Is(err, model.ErrStaleGeneration) {
		return err
	}
	return fmt.Errorf("%w: %w", model.ErrStaleGeneration, err)
}

func (s *Store) publishLocked(m *federation.PeerMessage) {
	if s.opts.Publish != nil {
		s.opts.Publish(m)
	}
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
func (s *Store) RemoveCluster(c model.ClusterID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markLocked(s.state.Remove(c)...)
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

// Clusters summarises what the store holds per cluster.
func (s *Store) Clusters() []model.ClusterSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.Clusters()
}

// HasCluster reports whether the state of cluster c is held.
func (s *Store) HasCluster(c model.ClusterID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.HasCluster(c)
}
