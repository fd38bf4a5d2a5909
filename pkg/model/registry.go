package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Generation orders the writers of one cluster's state. The hub hands every
// cluster watcher a generation larger than any before it, so a Registry can
// tell a replaced watcher's late writes from the current one's.
type Generation uint64

// Errors returned by Registry.
var (
	// ErrStaleGeneration means a write came from a watcher that has been
	// replaced (or whose cluster has been removed); it was ignored.
	ErrStaleGeneration = errors.New("model: stale generation")
	// ErrUnknownCluster means a shard update named a cluster whose initial
	// state was never published with ReplaceCluster.
	ErrUnknownCluster = errors.New("model: unknown cluster")
)

// MergedService is the fleet-wide view of one hostname: the Service and the
// endpoints of every cluster that has it. It is immutable.
type MergedService struct {
	Service *Service
	// Endpoints of every cluster, in canonical order (SortEndpoints).
	Endpoints []Endpoint
	// Clusters that have the service, sorted.
	Clusters []ClusterID
}

// ClusterSummary describes what the registry holds for one cluster.
type ClusterSummary struct {
	ID         ClusterID  `json:"id"`
	Generation Generation `json:"generation"`
	Services   int        `json:"services"`
	Endpoints  int        `json:"endpoints"`
}

type clusterState struct {
	gen    Generation
	shards map[Hostname]*ServiceShard
}

// Registry merges the service shards of many clusters. The zero value is not
// usable; call NewRegistry. A Registry is not safe for concurrent use.
type Registry struct {
	clusters map[ClusterID]*clusterState
	// removed remembers the generation of a removed cluster so that a late
	// write from its old watcher cannot bring it back.
	removed map[ClusterID]Generation
	// byHost indexes which clusters hold a shard of each hostname.
	byHost map[Hostname]map[ClusterID]struct{}
	// merged memoizes MergedService per hostname; entries are dropped when a
	// shard of the hostname changes.
	merged map[Hostname]*MergedService
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{
		clusters: map[ClusterID]*clusterState{},
		removed:  map[ClusterID]Generation{},
		byHost:   map[Hostname]map[ClusterID]struct{}{},
		merged:   map[Hostname]*MergedService{},
	}
}

// ReplaceCluster sets the whole state of cluster c, as listed by a watcher of
// generation gen, and returns the hostnames whose merged view changed. A
// write from a generation older than the cluster's current one (or than the
// one it was removed at) is ignored with ErrStaleGeneration.
func (r *Registry) ReplaceCluster(c ClusterID, gen Generation, shards map[Hostname]*ServiceShard) ([]Hostname, error) {
	if err := r.checkNewGen(c, gen); err != nil {
		return nil, err
	}
	delete(r.removed, c)
	cs := r.clusters[c]
	if cs == nil {
		cs = &clusterState{shards: map[Hostname]*ServiceShard{}}
		r.clusters[c] = cs
	}
	cs.gen = gen
	var changed []Hostname
	for h := range cs.shards {
		if _, keep := shards[h]; !keep {
			r.setShardLocked(c, cs, h, nil)
			changed = append(changed, h)
		}
	}
	for h, s := range shards {
		if old := cs.shards[h]; old != nil && old.Equal(s) {
			continue
		}
		r.setShardLocked(c, cs, h, s)
		changed = append(changed, h)
	}
	slices.Sort(changed)
	return changed, nil
}

func (r *Registry) checkNewGen(c ClusterID, gen Generation) error {
	if cs := r.clusters[c]; cs != nil && gen < cs.gen {
		return fmt.Errorf("cluster %s: generation %d is older than %d: %w", c, gen, cs.gen, ErrStaleGeneration)
	}
	if rg, ok := r.removed[c]; ok && gen <= rg {
		return fmt.Errorf("cluster %s: generation %d was removed at %d: %w", c, gen, rg, ErrStaleGeneration)
	}
	return nil
}

// UpdateShard sets (or, with a nil shard, deletes) cluster c's shard of
// hostname h. It reports whether the merged view of h changed.
func (r *Registry) UpdateShard(c ClusterID, gen Generation, h Hostname, shard *ServiceShard) (bool, error) {
	cs := r.clusters[c]
	if cs == nil {
		if _, ok := r.removed[c]; ok {
			return false, fmt.Errorf("cluster %s was removed: %w", c, ErrStaleGeneration)
		}
		return false, fmt.Errorf("cluster %s: %w", c, ErrUnknownCluster)
	}
	if gen != cs.gen {
		return false, fmt.Errorf("cluster %s: write from generation %d, current is %d: %w", c, gen, cs.gen, ErrStaleGeneration)
	}
	if cs.shards[h].Equal(shard) {
		return false, nil
	}
	r.setShardLocked(c, cs, h, shard)
	return true, nil
}

// RemoveCluster drops every shard of cluster c and returns the hostnames
// whose merged view changed. Writes of generations up to the removed one are
// refused afterwards.
func (r *Registry) RemoveCluster(c ClusterID) []Hostname {
	cs := r.clusters[c]
	if cs == nil {
		return nil
	}
	changed := slices.Sorted(maps.Keys(cs.shards))
	for _, h := range changed {
		r.setShardLocked(c, cs, h, nil)
	}
	delete(r.clusters, c)
	r.removed[c] = cs.gen
	return changed
}

// setShardLocked stores shard (nil deletes) and keeps the indexes current.
func (r *Registry) setShardLocked(c ClusterID, cs *clusterState, h Hostname, shard *ServiceShard) {
	delete(r.merged, h)
	if shard == nil {
		delete(cs.shards, h)
		if set := r.byHost[h]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(r.byHost, h)
			}
		}
		return
	}
	cs.shards[h] = shard
	set := r.byHost[h]
	if set == nil {
		set = map[ClusterID]struct{}{}
		r.byHost[h] = set
	}
	set[c] = struct{}{}
}

// Service returns the merged view of hostname h, or nil when no cluster has
// it. The result is memoized until a shard of h changes.
func (r *Registry) Service(h Hostname) *MergedService {
	if m, ok := r.merged[h]; ok {
		return m
	}
	set := r.byHost[h]
	if len(set) == 0 {
		return nil
	}
	clusters := slices.Sorted(maps.Keys(set))
	m := &MergedService{Clusters: clusters}
	n := 0
	for _, c := range clusters {
		n += len(r.clusters[c].shards[h].Endpoints)
	}
	m.Endpoints = make([]Endpoint, 0, n)
	for _, c := range clusters {
		shard := r.clusters[c].shards[h]
		m.Service = mergeService(m.Service, shard.Service)
		m.Endpoints = append(m.Endpoints, shard.Endpoints...)
	}
	SortEndpoints(m.Endpoints)
	r.merged[h] = m
	return m
}

// mergeService combines the same Service seen in two clusters: the first
// (lowest cluster ID) wins for each port number, and ports only one cluster
// declares are added. Istio merges the same way: a hostname is one service.
func mergeService(acc, s *Service) *Service {
	if acc == nil {
		return s
	}
	var extra []ServicePort
	for _, p := range s.Ports {
		if _, ok := acc.Port(p.Port); !ok {
			extra = append(extra, p)
		}
	}
	if len(extra) == 0 {
		return acc
	}
	out := *acc
	out.Ports = append(slices.Clone(acc.Ports), extra...)
	slices.SortFunc(out.Ports, func(a, b ServicePort) int { return int(a.Port) - int(b.Port) })
	return &out
}

// Hostnames returns every hostname some cluster has, sorted.
func (r *Registry) Hostnames() []Hostname {
	return slices.Sorted(maps.Keys(r.byHost))
}

// Clusters summarises every cluster the registry holds, sorted by ID.
func (r *Registry) Clusters() []ClusterSummary {
	out := make([]ClusterSummary, 0, len(r.clusters))
	for id, cs := range r.clusters {
		s := ClusterSummary{ID: id, Generation: cs.gen, Services: len(cs.shards)}
		for _, sh := range cs.shards {
			s.Endpoints += len(sh.Endpoints)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ClusterSummary) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// HasCluster reports whether cluster c has published its state.
func (r *Registry) HasCluster(c ClusterID) bool { return r.clusters[c] != nil }

// ClusterShards returns cluster c's shards by hostname, or nil when the
// registry does not hold c (a held cluster without services gives an empty,
// non-nil map). The map is a copy the caller may keep; the shards are shared,
// as they are immutable.
func (r *Registry) ClusterShards(c ClusterID) map[Hostname]*ServiceShard {
	cs := r.clusters[c]
	if cs == nil {
		return nil
	}
	return maps.Clone(cs.shards)
}
