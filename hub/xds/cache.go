package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// groupCache routes each watch to the watch cache that holds its type, and
// for load assignments to the one of the proxy's group. It implements
// cachev3.Cache.
//
// A proxy group's cache lives as long as a stream of the group is open:
// a stream is attached to the group of its node by the request that
// brings that node (the stream's request hook runs before the request's
// watch is created; its conn keeps the attachment), and when the last
// stream of a group closes, the group's watch cache and everything the
// planner holds for it are freed. A group that comes back is built afresh
// from the registry.
//
// Two locks: pushMu, the push lock, guards the planners while a push
// plans; mu guards what streams attach to, and is held only to look up and
// count. A stream's first request never waits for a push: a group, an
// Envoy sidecar or an inbound listener that is new is built on the
// stream's goroutine from the last plan's view, apart from the planners,
// and answered at once; the push loop adopts it into the planners next
// (apart.go).
type groupCache struct {
	shared  map[string]*versioned // by type URL: LDS, RDS, CDS; fixed at construction
	metrics *metrics
	// ledger versions every cache and keeps the config epochs.
	ledger *xdsstatus.Ledger
	opts   xdsgen.Options

	// services returns the registry's services, sorted by hostname (see
	// meshServices for the mesh's). It is safe for concurrent use.
	services func() []*model.MergedService
	// clusterNetwork gives a cluster's network, the network of its
	// proxies that say none (nil: unknown).
	clusterNetwork func(model.ClusterID) model.Network

	// pushMu is the push lock. It guards the planners (planner for
	// proxyless gRPC and every group's load assignments, envoy for
	// Envoy sidecars), so that what they record as written always
	// matches what was written: every plan, every adoption, every group
	// or sidecar freed. It is taken before mu, never after.
	pushMu  sync.Mutex
	planner *xdsgen.Planner
	envoy   *xdsgen.SidecarPlanner
	// view is what the last plan planned with, for what is built apart
	// from the planners.
	view atomic.Pointer[pushView]
	// buildMu serializes the streams' builds by the planners
	// (lockForBuild); taken before pushMu, held only while building.
	buildMu sync.Mutex

	// mu guards what streams attach to: groups, attached, sidecars and
	// apart. It is never held while building, writing or waiting.
	mu       sync.Mutex
	groups   map[xdsgen.ProxyGroup]*heldGroup
	attached int                 // streams attached (each conn holds its attachment)
	sidecars map[string]*sidecar // Envoy nodes by ID
	apart    builtApart          // built apart from the planners, to adopt
	// adopt signals (coalesced, capacity 1) that apart holds something.
	adopt chan struct{}

	// envoyRoutes holds the routes Envoy sidecars share (named by port
	// and route set), as the Envoy planner plans them.
	envoyRoutes *versioned

	// secrets is always empty: the SDS secrets of a server without
	// Credentials. An Envoy proxy that asks for one gets nothing, and
	// what needs it fails its handshakes, rather than its whole stream
	// an error. With Credentials, each Envoy node has its own
	// (nodeCredentials).
	secrets *versioned

	// debug answers Istio's debug types (istioctl); set once, by New.
	debug *xdsstatus.DebugTypes
	// unserved is told of each watch of a type the proxy gets nothing
	// of; set once, by New. It must not block.
	unserved func(typeURL string, node *corev3.Node)
	// credentials makes the credentials of an Envoy node of a cluster
	// and namespace; nil when the server serves none. Set once, by New.
	credentials func(cluster model.ClusterID, namespace string) *nodeCredentials
}

// pushView is what a plan planned with: its Istio configuration, the
// ledger epoch of that configuration, and the plan's number.
type pushView struct {
	cfg   *istioconfig.Snapshot
	nets  *model.NetworkGateways
	epoch uint64
	plan  uint64
}

// heldGroup is a proxy group that streams are attached to.
type heldGroup struct {
	members int // open streams of the group (never 0 once attached)
	// ready is made by the first watch of the group's load assignments
	// and closed once lc is set; nil before.
	ready chan struct{}
	lc    *versioned
}

var _ cachev3.Cache = (*groupCache)(nil)

func newGroupCache(opts xdsgen.Options, services func() []*model.MergedService, m *metrics, l *xdsstatus.Ledger) *groupCache {
	c := &groupCache{
		shared:      map[string]*versioned{},
		metrics:     m,
		ledger:      l,
		opts:        opts,
		services:    services,
		planner:     xdsgen.NewPlanner(opts),
		envoy:       xdsgen.NewSidecarPlanner(opts),
		groups:      map[xdsgen.ProxyGroup]*heldGroup{},
		sidecars:    map[string]*sidecar{},
		adopt:       make(chan struct{}, 1),
		envoyRoutes: newCache(l, resourcev3.RouteType, nil),
		secrets:     newCache(l, resourcev3.SecretType, nil),
	}
	sealed, _ := l.Epochs()
	c.view.Store(&pushView{epoch: sealed})
	for _, t := range xdsgen.SharedTypes {
		c.shared[t] = newCache(l, t, nil)
	}
	return c
}

// write is one cache's part of a plan.
type write struct {
	typeURL string
	cache   *versioned
	xdsgen.Changes
	// routesGone marks the deletion of the routes of sets a plan left
	// empty, which apply checks against the Envoy planner's record.
	routesGone bool
}

// apply makes write w of a plan (Server.push, in the plan's order). Every
// write but one is made as planned. The deletion of the routes of emptied
// sets, the plan's last, is checked under pushMu against the Envoy
// planner's record: a sidecar adopted since the plan (with no push holding
// the planner, a new node is adopted at once) may have brought a set back,
// and written its routes, which then stay.
func (c *groupCache) apply(w write) error {
	if !w.routesGone {
		return w.cache.UpdateResources(w.Upsert, w.Delete)
	}
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	planned := c.envoy.Routes()
	gone := slices.DeleteFunc(slices.Clone(w.Delete), func(name string) bool {
		_, back := planned[name]
		return back
	})
	if len(gone) == 0 {
		return nil
	}
	return w.cache.UpdateResources(nil, gone)
}

// plan computes the plan for hostnames hs, looking their views up with
// service, under the Istio configuration cfg (which adds the hostnames
// whose configuration changed since the last plan), and returns the writes
// it takes. It first adopts what was built apart since the last plan
// (adoptLocked). It holds pushMu while it plans; the writes are to be made
// after it returns, in the order given (apply), by the one goroutine that plans
// (the push loop): a group freed in between has its (dropped) cache
// written to in vain, a group built in between from this plan's view or
// an older one is brought up to date when it is adopted.
func (c *groupCache) plan(hs []model.Hostname, service func(model.Hostname) *model.MergedService, cfg *istioconfig.Snapshot, nets *model.NetworkGateways) []write {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	c.adoptLocked()
	view := *c.view.Load()
	view.plan++
	defer func() { c.view.Store(&view) }()
	secChanged := false
	if old := c.planner.Config(); cfg != old {
		secChanged = istioconfig.SecurityChanged(old, cfg)
		c.ledger.Begin(cfg)
		view.cfg = cfg
		_, view.epoch = c.ledger.Epochs()
		hosts := union(hostnames(c.services()), union(old.EntryHosts(), cfg.EntryHosts()))
		hs = union(hs, c.planner.SetConfig(cfg, hosts))
		// A ServiceEntry's host changes with the entry, not its
		// HostConfig.
		hs = union(hs, istioconfig.EntriesChanged(old, cfg))
	}
	if nets != c.planner.Networks() {
		// Gateways that route differently change every assignment of a
		// group on another network.
		hs = union(hs, c.planner.SetNetworks(nets, hostnames(c.services())))
		view.nets = c.planner.Networks()
	}
	updates := make([]xdsgen.ServiceUpdate, len(hs))
	for i, h := range hs {
		updates[i] = xdsgen.ServiceUpdate{Hostname: h, Service: istioconfig.MergeEntry(service(h), cfg.Entry(h))}
	}
	p := c.planner.Plan(updates)
	var services []*model.MergedService // read by the Envoy planner only while it holds a node
	if c.envoy.Nodes() > 0 {
		services = c.meshServicesLocked()
	}
	sp := c.envoy.Plan(updates, services, c.planner.Config(), secChanged)
	c.metrics.routeSets.Set(float64(c.envoy.RouteSets()))
	out := make([]write, 0, len(p.Shared)+len(p.Groups)+1)
	if in := c.refreshInboundLocked(updates, secChanged); len(in) > 0 {
		out = append(out, write{typeURL: resourcev3.ListenerType, cache: c.shared[resourcev3.ListenerType], Changes: xdsgen.Changes{Upsert: in}})
	}
	for t, ch := range p.Shared {
		out = append(out, write{typeURL: t, cache: c.shared[t], Changes: ch})
	}
	c.mu.Lock()
	for g, ch := range p.Groups {
		if hg := c.groups[g]; hg != nil && hg.lc != nil {
			out = append(out, write{typeURL: resourcev3.EndpointType, cache: hg.lc, Changes: ch})
		}
	}
	c.mu.Unlock()
	return append(out, c.sidecarWrites(sp)...)
}

// sidecarWrites returns the writes of the Envoy planner's plan, in the
// order it gives.
func (c *groupCache) sidecarWrites(sp xdsgen.SidecarPlan) []write {
	var out []write
	if len(sp.Routes.Upsert) > 0 {
		out = append(out, write{typeURL: resourcev3.RouteType, cache: c.envoyRoutes, Changes: sp.Routes})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, byType := range sp.Nodes {
		sc := c.sidecars[id]
		for _, t := range xdsgen.NodeTypes {
			if ch, ok := byType[t]; ok {
				out = append(out, write{typeURL: t, cache: sc.caches[t], Changes: ch})
			}
		}
	}
	if len(sp.RoutesGone) > 0 {
		out = append(out, write{typeURL: resourcev3.RouteType, cache: c.envoyRoutes, Changes: xdsgen.Changes{Delete: sp.RoutesGone}, routesGone: true})
	}
	return out
}

// seal ends the config epoch of the last plan once its writes are done
// (ledger.seal), and reports whether one ended.
func (c *groupCache) seal() bool {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	return c.ledger.Seal()
}

// meshServicesLocked returns the mesh's services under the planner's
// configuration (meshServices). The caller holds pushMu.
func (c *groupCache) meshServicesLocked() []*model.MergedService {
	return meshServices(c.services(), c.planner.Config())
}

// meshServices returns the mesh's services: base, the registry's, merged
// with the ServiceEntries of cfg (MergeEntry), sorted by hostname as the
// registry's are.
func meshServices(base []*model.MergedService, cfg *istioconfig.Snapshot) []*model.MergedService {
	entries := cfg.EntryHosts()
	if len(entries) == 0 {
		return base
	}
	out := make([]*model.MergedService, 0, len(base)+len(entries))
	i := 0
	for _, h := range entries {
		for i < len(base) && base[i].Service.Hostname < h {
			out = append(out, base[i])
			i++
		}
		var same *model.MergedService
		if i < len(base) && base[i].Service.Hostname == h {
			same = base[i]
			i++
		}
		out = append(out, istioconfig.MergeEntry(same, cfg.Entry(h)))
	}
	return append(out, base[i:]...)
}

// hostnames returns the hostnames of services.
func hostnames(services []*model.MergedService) []model.Hostname {
	out := make([]model.Hostname, len(services))
	for i, ms := range services {
		out[i] = ms.Service.Hostname
	}
	return out
}

// union returns a with the hostnames of b it lacks appended.
func union(a, b []model.Hostname) []model.Hostname {
	for _, h := range b {
		if !slices.Contains(a, h) {
			a = append(a, h)
		}
	}
	return a
}

// pick returns the cache of typeURL for a stream attached to at, whose
// conn (nil for a watch from elsewhere) keeps its group's load-assignment
// cache once found: after a stream's first request of a type, its watches
// take no lock of the groupCache, which a push holds while it plans.
func (c *groupCache) pick(typeURL string, at attachment, cn *conn) (*versioned, error) {
	if typeURL == resourcev3.EndpointType {
		if cn == nil {
			return c.group(at.group), nil
		}
		if cn.eds == nil {
			cn.eds = c.group(at.group)
		}
		return cn.eds, nil
	}
	if at.sidecar != "" {
		return c.pickSidecar(typeURL, at)
	}
	if lc, ok := c.shared[typeURL]; ok {
		return lc, nil
	}
	return nil, fmt.Errorf("%w: %q", errUnservedType, typeURL)
}

// errUnservedType is a request of a type the hub has no resources of for
// the proxy (a ztunnel's istio.workload.Address, say).
var errUnservedType = errors.New("xds: type not served")

// pickSidecar returns the cache of typeURL for the Envoy node of at: the
// node's own listeners and clusters (and a gateway's routes), else the
// shared Envoy routes. The
// node's stream is attached already (see attach).
func (c *groupCache) pickSidecar(typeURL string, at attachment) (*versioned, error) {
	sc := at.sc
	if sc == nil {
		c.mu.Lock()
		sc = c.sidecars[at.sidecar]
		c.mu.Unlock()
	}
	if sc == nil {
		return nil, fmt.Errorf("xds: no open stream of Envoy node %q", at.sidecar)
	}
	if sc.err != nil {
		return nil, sc.err
	}
	if lc, ok := sc.caches[typeURL]; ok {
		return lc, nil
	}
	switch typeURL {
	case resourcev3.RouteType:
		return c.envoyRoutes, nil
	case resourcev3.SecretType:
		if sc.creds != nil {
			return sc.creds.cache, nil
		}
		return c.secrets, nil
	}
	return nil, fmt.Errorf("%w to Envoy sidecars: %q", errUnservedType, typeURL)
}

// group returns the load-assignment cache of g. When it does not exist
// yet, the first caller builds it apart from the planner (buildGroup) and
// the others wait for that build, never for a push. A stream of g is
// attached already (see attach), so the cache is freed when the group's
// last stream closes.
func (c *groupCache) group(g xdsgen.ProxyGroup) *versioned {
	c.mu.Lock()
	hg := c.groups[g]
	if hg == nil {
		// A watch with no stream attached (tests): held until the end.
		hg = &heldGroup{}
		c.groups[g] = hg
	}
	build := hg.ready == nil
	if build {
		hg.ready = make(chan struct{})
	}
	c.mu.Unlock()
	if build {
		c.buildGroup(g, hg)
	}
	<-hg.ready
	return hg.lc
}

func (c *groupCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if xdsstatus.IsDebugType(req.GetTypeUrl()) {
		return c.debug.CreateWatch(req, sub, out)
	}
	at, cn := c.attachmentOfWatch(sub, req.GetNode())
	lc, err := c.pick(req.GetTypeUrl(), at, cn)
	if err != nil {
		return c.unservedWatch(req.GetTypeUrl(), req.GetNode(), err)
	}
	c.addInbound(req.GetTypeUrl(), at.group.Cluster, lc, sub)
	wantCredentials(req.GetTypeUrl(), at, cn, sub)
	return lc.CreateWatch(req, sub, out)
}

// wantCredentials hands the SDS names of a watch of an Envoy node with
// credentials to them (nodeCredentials.want) before the watch is made,
// so that a name already known is answered by it.
func wantCredentials(typeURL string, at attachment, cn *conn, sub cachev3.Subscription) {
	if typeURL != resourcev3.SecretType || at.sc == nil || at.sc.creds == nil {
		return
	}
	at.sc.creds.want(sub.SubscribedResources(), cn != nil && cn.auth.caller != nil)
}

// unservedWatch is the watch of a request that pick refused: one that is
// never answered when the hub serves nothing of the type to the proxy, as
// istiod answers a type it has no generator for, so that the proxy's
// other types keep being served on the stream; else err, which ends the
// stream.
func (c *groupCache) unservedWatch(typeURL string, node *corev3.Node, err error) (func(), error) {
	if !errors.Is(err, errUnservedType) {
		return nil, err
	}
	if c.unserved != nil {
		c.unserved(typeURL, node)
	}
	return func() {}, nil
}

func (c *groupCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	if xdsstatus.IsDebugType(req.GetTypeUrl()) {
		return c.debug.CreateDeltaWatch(req, sub, out)
	}
	at, cn := c.attachmentOfWatch(sub, req.GetNode())
	lc, err := c.pick(req.GetTypeUrl(), at, cn)
	if err != nil {
		return c.unservedWatch(req.GetTypeUrl(), req.GetNode(), err)
	}
	c.addInbound(req.GetTypeUrl(), at.group.Cluster, lc, sub)
	wantCredentials(req.GetTypeUrl(), at, cn, sub)
	return lc.CreateDeltaWatch(req, resyncOnConnect(req, sub), out)
}

// resyncOnConnect returns the subscription for a Delta watch: for the
// first request of a type that names its resources and declares versions
// the proxy already holds (initial_resource_versions, sent by a proxy
// whose stream was replaced, e.g. by pilot-agent after its upstream
// connection failed), one that declares them all outdated; else sub. A
// watch cache answers a named subscription only when a resource differs
// from what the proxy declares, so a reconnecting proxy that was up to
// date got no answer at all, and the hub showed the type as NOT SENT for
// as long as nothing changed. Like istiod, which answers the first request
// of every type on a new connection, the hub resends what the proxy holds
// (and removes what it no longer has); the proxy ACKs, and its status is
// SYNCED. Wildcard subscriptions (Envoy's listeners and clusters) are
// answered on the first request anyway, so they keep the versions and get
// only what changed.
func resyncOnConnect(req *cachev3.DeltaRequest, sub cachev3.Subscription) cachev3.Subscription {
	if req.GetResponseNonce() != "" || sub.IsWildcard() || len(sub.ReturnedResources()) == 0 {
		return sub
	}
	outdated := make(map[string]string, len(sub.ReturnedResources()))
	for name := range sub.ReturnedResources() {
		outdated[name] = ""
	}
	return resync{Subscription: sub, outdated: outdated}
}

// resync is a subscription whose known resources are all outdated (see
// resyncOnConnect). The stream server keeps its own subscription and
// records in it what the response returns.
type resync struct {
	cachev3.Subscription
	outdated map[string]string
}

func (r resync) ReturnedResources() map[string]string { return r.outdated }

// Fetch answers a REST request. For load assignments it answers only from
// a group that an open stream holds, so that REST requests, which have no
// stream to end, cannot create groups that are never freed.
func (c *groupCache) Fetch(ctx context.Context, req *cachev3.Request) (cachev3.Response, error) {
	if req.GetTypeUrl() == resourcev3.EndpointType {
		var lc *versioned
		c.mu.Lock()
		if hg := c.groups[ProxyGroupOf(req.GetNode())]; hg != nil && hg.ready != nil {
			select {
			case <-hg.ready:
				lc = hg.lc
			default:
			}
		}
		c.mu.Unlock()
		if lc == nil {
			return nil, fmt.Errorf("xds: no stream of proxy group %v is open", ProxyGroupOf(req.GetNode()))
		}
		return lc.Fetch(ctx, req)
	}
	lc, err := c.pick(req.GetTypeUrl(), c.attachmentOf(req.GetNode(), xdsnode.MetadataOf(req.GetNode().GetMetadata())), nil)
	if err != nil {
		return nil, err
	}
	return lc.Fetch(ctx, req)
}
