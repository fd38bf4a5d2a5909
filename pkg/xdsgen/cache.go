package xdsgen

import (
	"maps"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// ServiceResources are the proxy-independent resources of one service: the
// listeners, route configurations and clusters of its ports, each sorted by
// port.
type ServiceResources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
}

// Cache memoizes generated resources per hostname, so that a change rebuilds
// only the resources it affects: an endpoint change never rebuilds listeners,
// routes or clusters, and a change to one hostname rebuilds nothing of the
// others. Resources returned by a Cache are shared between callers and must
// be treated as immutable. The zero value is not usable; call NewCache. A
// Cache is pure (no I/O, clock or goroutines) and not safe for concurrent use.
type Cache struct {
	services  map[model.Hostname]serviceEntry
	endpoints map[model.Hostname]map[ProxyGroup]endpointsEntry
	// coarse holds, by ProxyGroup.coarse, the assignments last built for
	// a group to which no distribute entry applies: the same for every
	// group of that cluster and region, whatever their zones.
	coarse map[model.Hostname]map[ProxyGroup]endpointsEntry
	// pools holds per hostname the LbEndpoints every group's assignments
	// share (lbPool), for the merged service they were last built from.
	pools map[model.Hostname]*lbPool
	// clusters holds per hostname the clusters ServiceClusters last built.
	clusters map[model.Hostname]clustersEntry
}

type serviceEntry struct {
	svc *model.Service // private copy of the input
	cfg istioconfig.HostConfig
	res ServiceResources
}

// clustersEntry is what decided a hostname's ServiceClusters (see
// serviceClusterInputs) and the clusters built from it.
type clustersEntry struct {
	svc    *model.Service // private copy of the input
	dr     *istioconfig.DestinationRule
	secure map[string]bool
	sans   []string
	res    []*clusterv3.Cluster
}

type endpointsEntry struct {
	ms   *model.MergedService
	dr   *istioconfig.DestinationRule
	nets *model.NetworkGateways
	res  []*endpointv3.ClusterLoadAssignment
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{
		services:  map[model.Hostname]serviceEntry{},
		endpoints: map[model.Hostname]map[ProxyGroup]endpointsEntry{},
		coarse:    map[model.Hostname]map[ProxyGroup]endpointsEntry{},
		pools:     map[model.Hostname]*lbPool{},
		clusters:  map[model.Hostname]clustersEntry{},
	}
}

// poolOf returns the LbEndpoint pool of ms, starting a new one when ms is
// not the service the hostname's pool was made for.
func (c *Cache) poolOf(ms *model.MergedService) *lbPool {
	h := ms.Service.Hostname
	if p := c.pools[h]; p != nil && p.ms == ms {
		return p
	}
	p := newLBPool(ms)
	c.pools[h] = p
	return p
}

// Service returns the LDS/RDS/CDS resources for svc under the Istio
// configuration cfg of its host, rebuilding them only if svc changed
// (model.Service.Equal) or cfg names other objects (HostConfig.Same) since
// the last call for that hostname. rebuilt reports whether they were built
// by this call; when it is false the returned slices are the very ones
// returned before. domainSuffix resolves the short hosts of cfg's objects.
// A nil svc yields empty resources and false.
func (c *Cache) Service(svc *model.Service, cfg istioconfig.HostConfig, domainSuffix string) (res ServiceResources, rebuilt bool) {
	if svc == nil {
		return ServiceResources{}, false
	}
	if e, ok := c.services[svc.Hostname]; ok && e.svc.Equal(svc) && e.cfg.Same(cfg) {
		return e.res, false
	}
	res = ServiceResources{
		Listeners: Listeners(svc),
		Routes:    Routes(svc, cfg, domainSuffix),
		Clusters:  Clusters(svc, cfg.DestinationRule),
	}
	c.services[svc.Hostname] = serviceEntry{svc: ownCopy(svc), cfg: cfg, res: res}
	return res, true
}

// ownCopy copies svc for a memo, so that a caller mutating its Service
// afterwards cannot make a stale entry look current.
func ownCopy(svc *model.Service) *model.Service {
	own := *svc
	own.Ports = slices.Clone(svc.Ports)
	own.DNSEndpoints = slices.Clone(svc.DNSEndpoints)
	for i := range own.DNSEndpoints {
		own.DNSEndpoints[i].Ports = maps.Clone(own.DNSEndpoints[i].Ports)
	}
	return &own
}

// ServiceClusters returns ServiceClusters(ms, dr, cfg, opts), building the
// clusters only when what decides them changed since the last call for the
// hostname: the service (model.Service.Equal), dr (the very one), which of
// them are secure and the endpoints' SANs. Those last two are read from
// ms's endpoints and cfg on every call; an endpoint change that leaves
// them as they were, as most do, returns the very clusters returned
// before, with rebuilt false, which a diff then skips without comparing
// them. A nil ms (or ms.Service) yields nil and false.
func (c *Cache) ServiceClusters(ms *model.MergedService, dr *istioconfig.DestinationRule, cfg *istioconfig.Snapshot, opts Options) (res []*clusterv3.Cluster, rebuilt bool) {
	if ms == nil || ms.Service == nil {
		return nil, false
	}
	secure, sans := serviceClusterInputs(ms, dr, cfg, opts)
	h := ms.Service.Hostname
	if e, ok := c.clusters[h]; ok && e.dr == dr && e.svc.Equal(ms.Service) && maps.Equal(e.secure, secure) && slices.Equal(e.sans, sans) {
		return e.res, false
	}
	res = securedClusters(ms.Service, dr, secure, sans)
	c.clusters[h] = clustersEntry{svc: ownCopy(ms.Service), dr: dr, secure: secure, sans: sans, res: res}
	return res, true
}

// LoadAssignments returns NetworkLoadAssignments(ms, g, dr, nets),
// rebuilding it only if ms, dr or nets is not the very one given last time
// for this hostname and group.
// Pointer identity is the right test because a model.Registry returns the
// same immutable *MergedService for a hostname until one of its shards
// changes, and an istioconfig.Snapshot keeps an unchanged object's
// pointer. rebuilt reports whether the result is new for g since the last
// call (it may still be proto.Equal to the previous one, e.g. when only an
// unready endpoint changed). Groups that differ only in zone and sub-zone
// share one build when no distribute entry of dr applies to them
// (distributeApplies): the result then is the very slice built for the
// first of them, and rebuilt is still true for each group's first call
// with this ms and dr. A nil ms (or ms.Service) yields nil and false.
func (c *Cache) LoadAssignments(ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule, nets *model.NetworkGateways) (res []*endpointv3.ClusterLoadAssignment, rebuilt bool) {
	if ms == nil || ms.Service == nil {
		return nil, false
	}
	h := ms.Service.Hostname
	byGroup := c.endpoints[h]
	if e, ok := byGroup[g]; ok && e.ms == ms && e.dr == dr && e.nets == nets {
		return e.res, false
	}
	if byGroup == nil {
		byGroup = map[ProxyGroup]endpointsEntry{}
		c.endpoints[h] = byGroup
	}
	if distributeApplies(dr, g) {
		res = loadAssignments(ms, g, dr, nets, c.poolOf(ms))
	} else {
		cg := g.coarse()
		shared := c.coarse[h]
		if e, ok := shared[cg]; ok && e.ms == ms && e.dr == dr && e.nets == nets {
			res = e.res
		} else {
			if shared == nil {
				shared = map[ProxyGroup]endpointsEntry{}
				c.coarse[h] = shared
			}
			res = loadAssignments(ms, g, dr, nets, c.poolOf(ms))
			shared[cg] = endpointsEntry{ms: ms, dr: dr, nets: nets, res: res}
		}
	}
	byGroup[g] = endpointsEntry{ms: ms, dr: dr, nets: nets, res: res}
	return res, true
}

// Forget drops everything memoized for hostname h; call it when h leaves the
// registry. The next call for h rebuilds.
func (c *Cache) Forget(h model.Hostname) {
	delete(c.services, h)
	delete(c.endpoints, h)
	delete(c.coarse, h)
	delete(c.pools, h)
	delete(c.clusters, h)
}

// ForgetGroup drops the load assignments memoized for proxy group g, for
// every hostname, and those shared by the groups of its cluster and region
// (which the others then rebuild on their next change); call it when the
// last proxy of g disconnects.
func (c *Cache) ForgetGroup(g ProxyGroup) {
	for h, byGroup := range c.endpoints {
		delete(byGroup, g)
		if len(byGroup) == 0 {
			delete(c.endpoints, h)
			delete(c.pools, h)
		}
	}
	cg := g.coarse()
	for h, shared := range c.coarse {
		delete(shared, cg)
		if len(shared) == 0 {
			delete(c.coarse, h)
		}
	}
}

// groups returns how many distinct proxy groups have load assignments
// memoized, for any hostname.
func (c *Cache) groups() int {
	seen := map[ProxyGroup]struct{}{}
	for _, byGroup := range c.endpoints {
		for g := range byGroup {
			seen[g] = struct{}{}
		}
	}
	return len(seen)
}
