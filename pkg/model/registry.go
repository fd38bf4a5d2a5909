package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Generation identifies one local writer of a cluster's state (one
// cluster watcher): the hub hands every watcher a generation larger than any
// before it, so that a replaced watcher's late writes can be told from the
// current one's. Ordering writes across replicas is federation.State's job;
// the Registry only stores what it is told.
type Generation uint64

// ErrStaleGeneration means a write came from a watcher that has been
// replaced (or whose cluster has been removed, or taken over by another
// replica); it was ignored and the watcher should stop.
var ErrStaleGeneration = errors.New("model: stale generation")

// ErrUnknownCluster means a shard update named a cluster whose initial
// state was never set with ReplaceCluster.
var ErrUnknownCluster = errors.New("model: unknown cluster")

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
	ID        ClusterID `json:"id"`
	Services  int       `json:"services"`
	Endpoints int       `json:"endpoints"`
	// Network is the cluster's network (ClusterNetwork); empty when unknown.
	Network Network `json:"network,omitempty"`
}

type clusterState struct {
	shards map[Hostname]*ServiceShard
	// network is the cluster's network, as its shards last said it.
	network Network
}

// Registry merges the service shards of many clusters. It stores and
// merges; it does not order writes (which write wins is decided before a
// write reaches it, by federation.State). The zero value is not usable;
// call NewRegistry. A Registry is not safe for concurrent use.
type Registry struct {
	clusters map[ClusterID]*clusterState
	// byHost indexes which clusters hold a shard of each hostname.
	byHost map[Hostname]map[ClusterID]struct{}
	// merged memoizes MergedService per hostname; entries are dropped when a
	// shard of the hostname changes.
	merged map[Hostname]*MergedService

	// gateways indexes the shards that are network gateways, by cluster
	// and hostname; netRefs counts, per network, the shards with an
	// endpoint on it. networks memoizes the view built from both, dropped
	// when either changes.
	gateways map[ClusterID]map[Hostname]*NetworkGateway
	netRefs  map[Network]int
	networks *NetworkGateways
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{
		clusters: map[ClusterID]*clusterState{},
		byHost:   map[Hostname]map[ClusterID]struct{}{},
		merged:   map[Hostname]*MergedService{},
		gateways: map[ClusterID]map[Hostname]*NetworkGateway{},
		netRefs:  map[Network]int{},
	}
}

// ReplaceCluster sets the whole state of cluster c and returns the
// hostnames whose merged view changed. Nil shards are ignored.
func (r *Registry) ReplaceCluster(c ClusterID, shards map[Hostname]*ServiceShard) []Hostname {
	cs := r.clusters[c]
	if cs == nil {
		cs = &clusterState{shards: map[Hostname]*ServiceShard{}}
		r.clusters[c] = cs
	}
	var changed []Hostname
	for h := range cs.shards {
		if _, keep := shards[h]; !keep {
			r.setShardLocked(c, cs, h, nil)
			changed = append(changed, h)
		}
	}
	for h, s := range shards {
		if s == nil {
			continue
		}
		if old := cs.shards[h]; old != nil && old.Equal(s) {
			continue
		}
		r.setShardLocked(c, cs, h, s)
		changed = append(changed, h)
	}
	slices.Sort(changed)
	return changed
}

// UpdateShard sets (or, with a nil shard, deletes) cluster c's shard of
// hostname h. It reports whether the merged view of h changed, and fails
// with ErrUnknownCluster when c was never set with ReplaceCluster (or has
// been removed since).
func (r *Registry) UpdateShard(c ClusterID, h Hostname, shard *ServiceShard) (bool, error) {
	cs := r.clusters[c]
	if cs == nil {
		return false, fmt.Errorf("cluster %s: %w", c, ErrUnknownCluster)
	}
	if cs.shards[h].Equal(shard) {
		return false, nil
	}
	r.setShardLocked(c, cs, h, shard)
	return true, nil
}

// RemoveCluster drops every shard of cluster c and returns the hostnames
// whose merged view changed.
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
	return changed
}

// setShardLocked stores shard (nil deletes) and keeps the indexes current.
func (r *Registry) setShardLocked(c ClusterID, cs *clusterState, h Hostname, shard *ServiceShard) {
	delete(r.merged, h)
	r.indexNetworks(c, h, cs.shards[h], shard)
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
	cs.network = shard.Network
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
	if len(clusters) == 1 {
		// One cluster has the service, as most services: its shard's
		// endpoints are the merged view, already in canonical order, and
		// both are immutable, so they are shared rather than copied (a
		// copy per endpoint was ~150 B of the hub's heap).
		shard := r.clusters[clusters[0]].shards[h]
		m.Service = shard.Service
		m.Endpoints = shard.Endpoints
		if !endpointsSorted(m.Endpoints) {
			m.Endpoints = slices.Clone(m.Endpoints)
			SortEndpoints(m.Endpoints)
		}
		r.merged[h] = m
		return m
	}
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
		s := ClusterSummary{ID: id, Services: len(cs.shards), Network: cs.network}
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

// indexNetworks keeps the gateway index and the network counts current as
// cluster c's shard of h goes from old to shard (either may be nil).
func (r *Registry) indexNetworks(c ClusterID, h Hostname, old, shard *ServiceShard) {
	oldNets, newNets := shardNetworks(old), shardNetworks(shard)
	if !slices.Equal(oldNets, newNets) {
		for _, n := range oldNets {
			if r.netRefs[n]--; r.netRefs[n] <= 0 {
				delete(r.netRefs, n)
				r.networks = nil
			}
		}
		for _, n := range newNets {
			if r.netRefs[n]++; r.netRefs[n] == 1 {
				r.networks = nil
			}
		}
	}
	var oldGW, newGW *NetworkGateway
	if old != nil {
		oldGW = old.Gateway
	}
	if shard != nil {
		newGW = shard.Gateway
	}
	if oldGW.Equal(newGW) {
		return
	}
	r.networks = nil
	byHost := r.gateways[c]
	if newGW == nil {
		delete(byHost, h)
		if len(byHost) == 0 {
			delete(r.gateways, c)
		}
		return
	}
	if byHost == nil {
		byHost = map[Hostname]*NetworkGateway{}
		r.gateways[c] = byHost
	}
	byHost[h] = newGW
}

// shardNetworks returns the distinct known networks of s's endpoints,
// sorted (nil for a nil shard or a flat fleet's).
func shardNetworks(s *ServiceShard) []Network {
	if s == nil {
		return nil
	}
	var out []Network
	for i := range s.Endpoints {
		n := s.Endpoints[i].Network
		if n != "" && (len(out) == 0 || out[len(out)-1] != n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// NetworkGateways returns the fleet's networks and their gateways. It is
// memoized until a gateway, or the set of networks endpoints are on,
// changes; compare with NetworkGateways.SameRoutes to tell whether load
// assignments change.
func (r *Registry) NetworkGateways() *NetworkGateways {
	if r.networks == nil {
		r.networks = buildNetworkGateways(r.gateways, slices.Collect(maps.Keys(r.netRefs)))
	}
	return r.networks
}

// ClusterNetwork returns cluster c's network as its shards say it (empty
// when unknown or not held).
func (r *Registry) ClusterNetwork(c ClusterID) Network {
	if cs := r.clusters[c]; cs != nil {
		return cs.network
	}
	return ""
}
