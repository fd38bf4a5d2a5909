package store

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshfed/meshfed/pkg/model"
)

// Store is the hub's registry of every remote cluster's services. It is safe
// for concurrent use.
type Store struct {
	gen atomic.Uint64

	mu    sync.Mutex // guards reg and dirty
	reg   *model.Registry
	dirty map[model.Hostname]struct{}

	// changed has capacity 1: a pending signal stands for any number of
	// writes since the consumer last called TakeChanged.
	changed chan struct{}
}

// New returns an empty store.
func New() *Store {
	return &Store{
		reg:     model.NewRegistry(),
		dirty:   map[model.Hostname]struct{}{},
		changed: make(chan struct{}, 1),
	}
}

// NextGeneration returns a generation larger than every one before it, for a
// new cluster watcher.
func (s *Store) NextGeneration() model.Generation {
	return model.Generation(s.gen.Add(1))
}

// ReplaceCluster publishes the whole state of cluster c (see
// model.Registry.ReplaceCluster).
func (s *Store) ReplaceCluster(c model.ClusterID, gen model.Generation, shards map[model.Hostname]*model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.reg.ReplaceCluster(c, gen, shards)
	s.markLocked(changed...)
	return err
}

// UpdateShard publishes cluster c's shard of hostname h; a nil shard deletes it.
func (s *Store) UpdateShard(c model.ClusterID, gen model.Generation, h model.Hostname, shard *model.ServiceShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.reg.UpdateShard(c, gen, h, shard)
	if changed {
		s.markLocked(h)
	}
	return err
}

// RemoveCluster drops every shard of cluster c.
func (s *Store) RemoveCluster(c model.ClusterID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markLocked(s.reg.RemoveCluster(c)...)
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
