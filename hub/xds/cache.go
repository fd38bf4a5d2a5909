package xds

import (
	"context"
	"fmt"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// groupCache routes each watch to the LinearCache that holds its type, and
// for load assignments to the one of the proxy's group. It implements
// cachev3.Cache.
//
// A proxy group's cache lives as long as a stream of the group is open:
// each stream is attached to the group of its node on every request (the
// stream server's request callback runs before the request's watch is
// created), and when the last stream of a group closes, the group's
// LinearCache and everything the planner holds for it are freed. A group
// that comes back is built afresh from the registry.
type groupCache struct {
	shared  map[string]*cachev3.LinearCache // by type URL: LDS, RDS, CDS; fixed at construction
	metrics *metrics

	// services returns the registry's services, to fill a new group's
	// cache. It is called with mu held, so a push cannot interleave.
	services func() []*model.MergedService

	// mu guards planner, eds, streams and members: every planned change and
	// every group created or freed, so that what the planner records as
	// written always matches the set of caches.
	mu      sync.Mutex
	planner *xdsgen.Planner
	eds     map[xdsgen.ProxyGroup]*cachev3.LinearCache // load assignments of each held group
	streams map[streamKey]xdsgen.ProxyGroup            // the group each open stream is attached to
	members map[xdsgen.ProxyGroup]int                  // open streams per group (never 0)
}

var _ cachev3.Cache = (*groupCache)(nil)

func newGroupCache(opts xdsgen.Options, services func() []*model.MergedService, m *metrics) *groupCache {
	c := &groupCache{
		shared:   map[string]*cachev3.LinearCache{},
		metrics:  m,
		services: services,
		planner:  xdsgen.NewPlanner(opts),
		eds:      map[xdsgen.ProxyGroup]*cachev3.LinearCache{},
		streams:  map[streamKey]xdsgen.ProxyGroup{},
		members:  map[xdsgen.ProxyGroup]int{},
	}
	for _, t := range xdsgen.SharedTypes {
		c.shared[t] = cachev3.NewLinearCache(t)
	}
	return c
}

// write is one cache's part of a plan.
type write struct {
	typeURL string
	cache   *cachev3.LinearCache
	xdsgen.Changes
}

// plan computes the plan for hostnames hs, looking their views up with
// service, and returns the writes it takes. It holds mu while it plans, so
// the writes are to be made after it returns, in any order: a group freed
// in between has its (dropped) cache written to in vain, a group created in
// between was built with the planned state already.
func (c *groupCache) plan(hs []model.Hostname, service func(model.Hostname) *model.MergedService) []write {
	c.mu.Lock()
	defer c.mu.Unlock()
	updates := make([]xdsgen.ServiceUpdate, len(hs))
	for i, h := range hs {
		updates[i] = xdsgen.ServiceUpdate{Hostname: h, Service: service(h)}
	}
	p := c.planner.Plan(updates)
	out := make([]write, 0, len(p.Shared)+len(p.Groups))
	for t, ch := range p.Shared {
		out = append(out, write{typeURL: t, cache: c.shared[t], Changes: ch})
	}
	for g, ch := range p.Groups {
		out = append(out, write{typeURL: resourcev3.EndpointType, cache: c.eds[g], Changes: ch})
	}
	return out
}

func (c *groupCache) pick(typeURL string, node *corev3.Node) (*cachev3.LinearCache, error) {
	if typeURL == resourcev3.EndpointType {
		return c.group(ProxyGroupOf(node)), nil
	}
	if lc, ok := c.shared[typeURL]; ok {
		return lc, nil
	}
	return nil, fmt.Errorf("xds: type %q is not served", typeURL)
}

// group returns the load-assignment cache of g, creating and filling it
// when it does not exist yet. A stream of g is attached already (see
// attach), so the cache is freed when the group's last stream closes.
func (c *groupCache) group(g xdsgen.ProxyGroup) *cachev3.LinearCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	lc, ok := c.eds[g]
	if !ok {
		initial := c.planner.AddGroup(g, c.services())
		lc = cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithInitialResources(initial))
		c.eds[g] = lc
		c.metrics.groupsBuilt.Inc()
		c.metrics.groups.Set(float64(len(c.eds)))
	}
	return lc
}

// attach counts stream k as a member of the group of node, moving it there
// if its node named another group before. Call it for every request,
// before the request's watch is created. A nil node keeps the stream's
// group: Delta requests after the first may omit the node, and the Delta
// stream server fills it in only after the request callback.
func (c *groupCache) attach(k streamKey, node *corev3.Node) {
	g := ProxyGroupOf(node)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.streams[k]; ok {
		if cur == g || node == nil {
			return
		}
		c.detachLocked(k)
	}
	c.streams[k] = g
	c.members[g]++
}

// detach forgets stream k, freeing its group when k was the group's last
// stream. Call it when the stream closes.
func (c *groupCache) detach(k streamKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detachLocked(k)
}

// detachLocked is detach with mu held.
func (c *groupCache) detachLocked(k streamKey) {
	g, ok := c.streams[k]
	if !ok {
		return
	}
	delete(c.streams, k)
	if c.members[g]--; c.members[g] > 0 {
		return
	}
	delete(c.members, g)
	// The group's streams are gone, and with them their watches on lc.
	delete(c.eds, g)
	c.planner.ForgetGroup(g)
	c.metrics.groups.Set(float64(len(c.eds)))
}

// heldGroups counts what a groupCache holds per proxy group and stream.
type heldGroups struct {
	caches   int // load-assignment LinearCaches
	streams  int // streams attached to a group
	members  int // groups with an attached stream
	planned  int // groups the planner tracks
	memoized int // groups the generation cache memoizes assignments for
}

// held reports what the cache holds for proxy groups; every count falls to
// zero when every proxy has left.
func (c *groupCache) held() heldGroups {
	c.mu.Lock()
	defer c.mu.Unlock()
	return heldGroups{
		caches:   len(c.eds),
		streams:  len(c.streams),
		members:  len(c.members),
		planned:  len(c.planner.Groups()),
		memoized: c.planner.MemoizedGroups(),
	}
}

// addInbound puts the subscribed inbound listeners that lc lacks into lc,
// before a watch for them is created, so the watch is answered at once.
func (c *groupCache) addInbound(typeURL string, lc *cachev3.LinearCache, sub cachev3.Subscription) {
	if typeURL != resourcev3.ListenerType || sub == nil {
		return
	}
	names := make([]string, 0, len(sub.SubscribedResources()))
	for n := range sub.SubscribedResources() {
		names = append(names, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if up := c.planner.Inbound(names); len(up) > 0 {
		// Updating only fails for a nil resource.
		_ = lc.UpdateResources(up, nil)
	}
}

func (c *groupCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	lc, err := c.pick(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	c.addInbound(req.GetTypeUrl(), lc, sub)
	return lc.CreateWatch(req, sub, out)
}

func (c *groupCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	lc, err := c.pick(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	c.addInbound(req.GetTypeUrl(), lc, sub)
	return lc.CreateDeltaWatch(req, sub, out)
}

// Fetch answers a REST request. For load assignments it answers only from
// a group that an open stream holds, so that REST requests, which have no
// stream to end, cannot create groups that are never freed.
func (c *groupCache) Fetch(ctx context.Context, req *cachev3.Request) (cachev3.Response, error) {
	if req.GetTypeUrl() == resourcev3.EndpointType {
		c.mu.Lock()
		lc := c.eds[ProxyGroupOf(req.GetNode())]
		c.mu.Unlock()
		if lc == nil {
			return nil, fmt.Errorf("xds: no stream of proxy group %v is open", ProxyGroupOf(req.GetNode()))
		}
		return lc.Fetch(ctx, req)
	}
	lc, err := c.pick(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	return lc.Fetch(ctx, req)
}
