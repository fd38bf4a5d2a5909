package xdsgen

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// SharedTypes are the type URLs whose resources are the same for every
// proxy (one cache each): listeners, route configurations and clusters.
// Load assignments (resourcev3.EndpointType) are per ProxyGroup.
var SharedTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType}

// ServiceUpdate is a hostname whose merged view changed, with its view now.
// A nil Service (or one without a Service) means the hostname left the
// registry.
type ServiceUpdate struct {
	Hostname model.Hostname
	Service  *model.MergedService
}

// Changes are the writes into one cache: the resources to put, by name, and
// the names to delete (sorted). A name is never in both.
type Changes struct {
	Upsert map[string]types.Resource
	Delete []string
}

// Empty reports whether c writes nothing.
func (c Changes) Empty() bool { return len(c.Upsert) == 0 && len(c.Delete) == 0 }

// Plan is what one push must write: the changes of each shared cache, by
// type URL (SharedTypes), and of each proxy group's load-assignment cache.
// It holds real changes only: no resource proto.Equal to the one written
// before, no delete of a name that is not written, and no entry for a
// cache that does not change.
type Plan struct {
	Shared map[string]Changes
	Groups map[ProxyGroup]Changes
}

// Empty reports whether p writes nothing.
func (p Plan) Empty() bool { return len(p.Shared) == 0 && len(p.Groups) == 0 }

// Planner turns registry changes into Plans. It remembers what it has
// planned, which the caller promises to write: per shared type and per proxy
// group, the resources by name, so that the next Plan is a diff against
// them; and per hostname the names of its resources, so that a removed port
// or service is deleted. Generation is memoized in a Cache.
//
// A Planner is pure (no I/O, clock or goroutines) and not safe for
// concurrent use; the zero value is not usable, call NewPlanner.
type Planner struct {
	opts   Options
	gen    *Cache
	config *istioconfig.Snapshot
	nets   *model.NetworkGateways
	names  map[model.Hostname]hostNames

	// written holds what the plans so far put into each cache: shared by
	// type URL, groups by proxy group (only groups added and not forgotten).
	shared map[string]map[string]types.Resource
	groups map[ProxyGroup]map[string]types.Resource

	// inbound holds what each written inbound listener was built for.
	inbound map[string]inboundRef
}

// hostNames are the names of a hostname's shared resources, each sorted.
// Load assignments are named as the clusters are (EDS service names).
type hostNames struct {
	listeners, routes, clusters []string
}

func hostNamesOf(res ServiceResources) hostNames {
	var n hostNames
	for _, r := range res.Listeners {
		n.listeners = append(n.listeners, r.GetName())
	}
	for _, r := range res.Routes {
		n.routes = append(n.routes, r.GetName())
	}
	for _, r := range res.Clusters {
		n.clusters = append(n.clusters, r.GetName())
	}
	slices.Sort(n.listeners)
	slices.Sort(n.routes)
	slices.Sort(n.clusters)
	return n
}

// NewPlanner returns a Planner that has written nothing and tracks no group.
func NewPlanner(opts Options) *Planner {
	p := &Planner{
		opts:    opts,
		gen:     NewCache(),
		names:   map[model.Hostname]hostNames{},
		shared:  map[string]map[string]types.Resource{},
		groups:  map[ProxyGroup]map[string]types.Resource{},
		inbound: map[string]inboundRef{},
	}
	for _, t := range SharedTypes {
		p.shared[t] = map[string]types.Resource{}
	}
	return p
}

// pending collects one cache's writes while a plan is built, before they
// are diffed against what was written: by name, the resource to put, or
// nil to delete. The last write of a name wins, so a hostname that leaves
// and comes back within one plan keeps its resources.
type pending map[string]types.Resource

func (u pending) put(name string, r types.Resource) { u[name] = r }

func (u pending) del(name string) { u[name] = nil }

// Plan returns what to write so that the caches hold the resources of
// updates (and still those of every other hostname planned before), and
// records it as written. Listeners, routes and clusters are rebuilt only
// for a changed model.Service or other Istio objects of its host (see
// SetConfig), and clusters also for changed endpoint labels, target
// ports or service accounts (ServiceClusters); a group's load assignments
// only for a new MergedService or DestinationRule (see Cache). A hostname that left the registry, or a port
// or subset that left a service, has its resources deleted from every
// cache, including every group's.
func (p *Planner) Plan(updates []ServiceUpdate) Plan {
	b := draft{shared: map[string]pending{}, eds: make(map[ProxyGroup]pending, len(p.groups))}
	for _, t := range SharedTypes {
		b.shared[t] = pending{}
	}
	for g := range p.groups {
		b.eds[g] = pending{}
	}
	for _, up := range updates {
		p.planService(b, up.Hostname, up.Service)
	}

	var plan Plan
	for t, u := range b.shared {
		if c := commit(p.shared[t], u); !c.Empty() {
			if plan.Shared == nil {
				plan.Shared = map[string]Changes{}
			}
			plan.Shared[t] = c
		}
	}
	for g, u := range b.eds {
		if c := commit(p.groups[g], u); !c.Empty() {
			if plan.Groups == nil {
				plan.Groups = map[ProxyGroup]Changes{}
			}
			plan.Groups[g] = c
		}
	}
	return plan
}

// draft is a plan being built: the pending writes of each shared cache, by
// type URL, and of each tracked group's.
type draft struct {
	shared map[string]pending
	eds    map[ProxyGroup]pending
}

// withdraw deletes from every cache the resources named in old but not in
// kept (nothing is kept when a hostname leaves).
func (b draft) withdraw(old, kept hostNames) {
	gone := func(name string, kept []string) bool {
		_, found := slices.BinarySearch(kept, name)
		return !found
	}
	for _, n := range old.listeners {
		if gone(n, kept.listeners) {
			b.shared[resourcev3.ListenerType].del(n)
		}
	}
	for _, n := range old.routes {
		if gone(n, kept.routes) {
			b.shared[resourcev3.RouteType].del(n)
		}
	}
	for _, n := range old.clusters {
		if gone(n, kept.clusters) {
			b.shared[resourcev3.ClusterType].del(n)
			for _, u := range b.eds {
				u.del(n)
			}
		}
	}
}

// SetConfig makes s the Istio configuration of the next Plans (nil: none).
// It returns, of hosts (the registry's hostnames), those whose
// configuration changed, which the caller must plan for the change to
// reach the caches: all of them when the security objects changed
// (istioconfig.SecurityChanged), which every host's clusters follow. The
// inbound listeners that a security change touches are RefreshInbound's.
func (p *Planner) SetConfig(s *istioconfig.Snapshot, hosts []model.Hostname) []model.Hostname {
	var changed []model.Hostname
	if istioconfig.SecurityChanged(p.config, s) {
		// Every host's clusters follow its endpoints' PeerAuthentications
		// (auto mTLS, ServiceClusters).
		changed = slices.Clone(hosts)
	} else {
		changed = istioconfig.ChangedHosts(p.config, s, hosts)
	}
	p.config = s
	return changed
}

// SetNetworks makes nets the network gateways of the next Plans. When
// they route differently from the current ones (model.NetworkGateways.
// SameRoutes) it returns hosts (the registry's hostnames), which the caller
// must plan for the change to reach the caches; otherwise nothing, and
// the current gateways stay (so memoized assignments stay current).
func (p *Planner) SetNetworks(nets *model.NetworkGateways, hosts []model.Hostname) []model.Hostname {
	if p.nets.SameRoutes(nets) {
		return nil
	}
	p.nets = nets
	return slices.Clone(hosts)
}

// Networks returns the network gateways Plans use.
func (p *Planner) Networks() *model.NetworkGateways { return p.nets }

// Config returns the configuration Plans use.
func (p *Planner) Config() *istioconfig.Snapshot { return p.config }

// planService adds to b the writes for hostname h, whose view is now ms
// (nil when it left), and updates the names and memos kept for h.
func (p *Planner) planService(b draft, h model.Hostname, ms *model.MergedService) {
	old := p.names[h]
	if ms == nil || ms.Service == nil {
		b.withdraw(old, hostNames{})
		delete(p.names, h)
		p.gen.Forget(h)
		return
	}
	cfg := p.config.Host(h)
	if res, rebuilt := p.gen.Service(ms.Service, cfg, p.config.DomainSuffix()); rebuilt {
		names := hostNamesOf(res)
		for _, r := range res.Listeners {
			b.shared[resourcev3.ListenerType].put(r.GetName(), r)
		}
		for _, r := range res.Routes {
			b.shared[resourcev3.RouteType].put(r.GetName(), r)
		}
		// The clusters written are ServiceClusters' (below), never the
		// plain res.Clusters: those only name them.
		b.withdraw(old, names)
		p.names[h] = names
	}
	// Clusters also depend on the endpoints (labels, service accounts) and
	// on PeerAuthentications, which can ask for mutual TLS even without
	// Security (ServiceClusters); they are put only when rebuilt (a new
	// service, DestinationRule, secure set or SANs), and the diff drops
	// them when they did not change.
	if clusters, rebuilt := p.gen.ServiceClusters(ms, cfg.DestinationRule, p.config, p.opts); rebuilt {
		for _, r := range clusters {
			b.shared[resourcev3.ClusterType].put(r.GetName(), r)
		}
	}
	if dnsResolved(ms.Service) {
		// A DNS-resolved service has no load assignments (its clusters
		// carry their endpoints): delete those written while it was
		// resolved by endpoints (commit drops deletes of unwritten names).
		// The loop below memoizes the empty result.
		for _, u := range b.eds {
			for _, n := range p.names[h].clusters {
				u.del(n)
			}
		}
	}
	for g, u := range b.eds {
		if clas, rebuilt := p.gen.LoadAssignments(ms, g, cfg.DestinationRule, p.nets); rebuilt {
			for _, cla := range clas {
				u.put(cla.GetClusterName(), cla)
			}
		}
	}
}

// Replace diffs next, the whole set of resources a cache should hold,
// against written, what it holds: names missing from next are deleted,
// resources equal to those written are left out. It records the result in
// written and returns it. It is Plan's bookkeeping for callers that
// regenerate a cache's whole content (the hub's per-sidecar caches).
func Replace(written, next map[string]types.Resource) Changes {
	u := pending{}
	for n := range written {
		if _, ok := next[n]; !ok {
			u.del(n)
		}
	}
	for n, r := range next {
		u.put(n, r)
	}
	return commit(written, u)
}

// commit diffs u against written, the resources a cache holds, records the
// result in written and returns it.
func commit(written map[string]types.Resource, u pending) Changes {
	var c Changes
	for n, r := range u {
		cur, ok := written[n]
		switch {
		case r == nil && ok:
			c.Delete = append(c.Delete, n)
			delete(written, n)
		case r == nil, ok && (cur == r || proto.Equal(cur, r)):
		default:
			if c.Upsert == nil {
				c.Upsert = map[string]types.Resource{}
			}
			c.Upsert[n] = r
			written[n] = r
		}
	}
	slices.Sort(c.Delete)
	return c
}

// AddGroup starts tracking proxy group g: it returns the load assignments
// of services for g, the initial content of g's cache, and records them as
// written; from then on every Plan covers g. services must be the
// registry's current views (the same ones later Plans are given). If g is
// tracked already, AddGroup returns what was written for it. The map
// returned is the Planner's record: the caller must not modify it
// (cachev3.WithInitialResources copies it).
func (p *Planner) AddGroup(g ProxyGroup, services []*model.MergedService) map[string]types.Resource {
	if w, ok := p.groups[g]; ok {
		return w
	}
	w := map[string]types.Resource{}
	for _, ms := range services {
		clas, _ := p.gen.LoadAssignments(ms, g, p.config.Host(ms.Service.Hostname).DestinationRule, p.nets)
		for _, cla := range clas {
			w[cla.GetClusterName()] = cla
		}
	}
	p.groups[g] = w
	return w
}

// GroupAssignments returns the load assignments of services for proxy
// group g under cfg and the network gateways nets, by cluster name, built afresh: what a new group's
// cache starts with when it is built apart from the Planner, which then
// adopts the group (AddGroup builds the same, its endpoints shared with
// the other groups'). It is pure.
func GroupAssignments(services []*model.MergedService, g ProxyGroup, cfg *istioconfig.Snapshot, nets *model.NetworkGateways) map[string]types.Resource {
	out := map[string]types.Resource{}
	for _, ms := range services {
		for _, cla := range NetworkLoadAssignments(ms, g, cfg.Host(ms.Service.Hostname).DestinationRule, nets) {
			out[cla.GetClusterName()] = cla
		}
	}
	return out
}

// ForgetGroup stops tracking g and drops everything held for it (what was
// written and the memoized load assignments); call it when the last proxy
// of g leaves. A later AddGroup(g) builds g afresh.
func (p *Planner) ForgetGroup(g ProxyGroup) {
	delete(p.groups, g)
	p.gen.ForgetGroup(g)
}

// Groups returns the tracked proxy groups, sorted by cluster, region,
// zone, sub-zone, network, then east-west.
func (p *Planner) Groups() []ProxyGroup {
	out := make([]ProxyGroup, 0, len(p.groups))
	for g := range p.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b ProxyGroup) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Region, b.Region),
			cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.SubZone, b.SubZone),
			cmp.Compare(a.Network, b.Network), compareBool(a.EastWest, b.EastWest))
	})
	return out
}

// MemoizedGroups returns how many proxy groups the generation cache holds
// load assignments for; it falls to zero once every group is forgotten.
func (p *Planner) MemoizedGroups() int { return p.gen.groups() }

// WorkloadLookup returns the security policy of the workload at ip in
// cluster: what a proxyless server's inbound listener enforces.
type WorkloadLookup func(cluster model.ClusterID, ip netip.Addr) istioconfig.WorkloadSecurity

// inboundRef is what an inbound listener was built for: the cluster of the
// server that first asked for it (a Pod IP means one Pod per cluster; two
// clusters may reuse an address, and the listener name cannot tell them
// apart) and the workload policy it enforces.
type inboundRef struct {
	addr    netip.AddrPort
	cluster model.ClusterID
	sec     istioconfig.WorkloadSecurity
}

// Inbound returns the inbound (server-side) listeners among names that are
// not written yet, built by InboundListener under the policy lookup gives
// for the address in cluster (the asking server's), and records them as
// written into the listener cache. Other names, and inbound names that do
// not parse, are skipped. Plan never deletes them; RefreshInbound rebuilds
// those whose policy changed.
func (p *Planner) Inbound(names []string, cluster model.ClusterID, lookup WorkloadLookup) map[string]types.Resource {
	var out map[string]types.Resource
	written := p.shared[resourcev3.ListenerType]
	for _, n := range names {
		if !strings.HasPrefix(n, xdsnode.InboundListenerPrefix) {
			continue
		}
		if _, ok := written[n]; ok {
			continue
		}
		addr, err := ParseInboundListenerName(n)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]types.Resource{}
		}
		ref := inboundRef{addr: addr, cluster: cluster, sec: lookup(cluster, addr.Addr())}
		r := InboundListener(addr, ref.sec, p.opts)
		out[n] = r
		written[n] = r
		p.inbound[n] = ref
	}
	return out
}

// InboundCount returns how many inbound listeners the planner has written.
func (p *Planner) InboundCount() int { return len(p.inbound) }

// RefreshInbound rebuilds the inbound listeners whose workload policy, as
// lookup gives it now, is no longer the one they were built with: of all
// of them when ips is nil (the security configuration changed), else of
// those at an address in ips (the registry changed what it knows of the
// Pods there). It returns the listeners to upsert, recorded as written.
func (p *Planner) RefreshInbound(ips map[netip.Addr]bool, lookup WorkloadLookup) map[string]types.Resource {
	var out map[string]types.Resource
	for n, ref := range p.inbound {
		if ips != nil && !ips[ref.addr.Addr()] {
			continue
		}
		sec := lookup(ref.cluster, ref.addr.Addr())
		if sec.Same(ref.sec) {
			continue
		}
		ref.sec = sec
		p.inbound[n] = ref
		r := InboundListener(ref.addr, sec, p.opts)
		if out == nil {
			out = map[string]types.Resource{}
		}
		out[n] = r
		p.shared[resourcev3.ListenerType][n] = r
	}
	return out
}
