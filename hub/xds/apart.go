package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// What a stream's first request needs and the planners do not have yet (a
// proxy group's load assignments, an Envoy node's listeners and clusters,
// a proxyless server's inbound listeners) is built on the stream's
// goroutine from the last plan's view (groupCache.view and the registry
// now), written to its cache, and answered at once; the push lock is not
// taken, so a push stuck planning delays no new proxy. The push loop then
// adopts it (adoptLocked, at the start of its next plan or when signalled):
// the planners take it over and what changed since the view is written.
// Until then, pushes do not reach it; the ledger marks its versions with
// the epoch of the view it was built from (Ledger.newCacheAt). What a
// first request writes to a shared cache (an inbound listener, a new
// route set's routes) is only what that cache lacks; a seal that runs
// before the adoption may count those few names one epoch ahead, until the
// adoption writes the planner's and marks them.

// builtApart is what was built apart and awaits adoption.
type builtApart struct {
	groups   []apartGroup
	sidecars []apartSidecar
	inbound  []apartInbound
}

type apartGroup struct {
	g  xdsgen.ProxyGroup
	hg *heldGroup
}

type apartSidecar struct {
	id      string
	sc      *sidecar
	node    xdsgen.SidecarNode
	written map[string]map[string]types.Resource
	plan    uint64 // the view's plan it was built from
}

type apartInbound struct {
	names   []string
	cluster model.ClusterID
}

// queue adds to what awaits adoption and signals the push loop.
func (c *groupCache) queue(add func(*builtApart)) {
	c.mu.Lock()
	add(&c.apart)
	c.mu.Unlock()
	select {
	case c.adopt <- struct{}{}:
	default:
	}
}

// adoptions signals (coalesced) that something awaits adoption.
func (c *groupCache) adoptions() <-chan struct{} { return c.adopt }

// adoptBuilt adopts what was built apart (adoptLocked), between pushes.
func (c *groupCache) adoptBuilt() {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	c.adoptLocked()
}

// buildGroup builds g's load-assignment cache, sets it in hg and readies
// hg: by the planner when no push holds the push lock, else apart from it,
// from the view.
func (c *groupCache) buildGroup(g xdsgen.ProxyGroup, hg *heldGroup) {
	var lc *versioned
	apart := !c.lockForBuild()
	if apart {
		v := c.view.Load()
		initial := xdsgen.GroupAssignments(meshServices(c.services(), v.cfg), g, v.cfg, v.nets)
		lc = newCacheAt(c.ledger, resourcev3.EndpointType, initial, v.epoch)
	} else {
		// No push in progress: the planner builds it at once, sharing
		// its endpoints with the other groups', and nothing is adopted.
		lc = newCache(c.ledger, resourcev3.EndpointType, c.planner.AddGroup(g, c.meshServicesLocked()))
		c.unlockBuild()
	}
	c.mu.Lock()
	hg.lc = lc
	close(hg.ready)
	c.metrics.groupsBuilt.Inc()
	c.metrics.groups.Set(float64(c.builtGroupsLocked()))
	c.mu.Unlock()
	if apart {
		c.queue(func(b *builtApart) { b.groups = append(b.groups, apartGroup{g, hg}) })
	}
}

// builtGroupsLocked counts the groups whose cache is built.
func (c *groupCache) builtGroupsLocked() int {
	n := 0
	for _, hg := range c.groups {
		if hg.lc != nil {
			n++
		}
	}
	return n
}

// buildSidecar builds the caches of Envoy node id, whose first stream
// this is, and readies sc: by the planner when no push holds the push
// lock, else apart from it, from the view.
func (c *groupCache) buildSidecar(id string, sc *sidecar, node *corev3.Node, md xdsnode.Metadata) {
	defer close(sc.ready)
	proxy, cluster, err := sidecarOf(node, md)
	if err != nil {
		sc.err = err
		return
	}
	node0 := xdsgen.SidecarNode{Proxy: proxy, Cluster: cluster,
		Claimed: xdsgen.Workload{Namespace: proxy.Namespace, Labels: model.NewLabels(md.Labels)}}
	if c.credentials != nil {
		sc.creds = c.credentials(cluster, proxy.Namespace)
	}
	if c.lockForBuild() {
		// No push in progress: the planner takes the node at once.
		defer c.unlockBuild()
		services, cfg := c.meshServicesLocked(), c.planner.Config()
		n, built := xdsgen.BuildSidecar(node0, services, cfg, c.opts)
		sc.caches = newSidecarCaches(c.ledger, built, 0, false)
		c.writeAdopted(c.envoy.Adopt(id, n, built, services, cfg, false))
		return
	}
	v := c.view.Load()
	services := meshServices(c.services(), v.cfg)
	n, built := xdsgen.BuildSidecar(node0, services, v.cfg, c.opts)
	sc.caches = newSidecarCaches(c.ledger, built, v.epoch, true)
	// The shared routes its listeners name that nobody wrote yet (the
	// first sidecar's, or those of a new route set): the planner writes
	// the same when it adopts the node.
	routes := map[string]types.Resource{}
	if !n.Proxy.Router {
		for _, r := range xdsgen.SidecarSetRoutes(services, v.cfg, n.Proxy.RouteSet(), c.opts) {
			if !c.envoyRoutes.has(r.GetName()) {
				routes[r.GetName()] = r
			}
		}
	}
	if len(routes) > 0 {
		// Updating only fails for a nil resource.
		_ = c.envoyRoutes.UpdateResources(routes, nil)
	}
	c.queue(func(b *builtApart) {
		b.sidecars = append(b.sidecars, apartSidecar{id: id, sc: sc, node: n, written: built, plan: v.plan})
	})
}

// adoptLocked hands what was built apart to the planners, and writes at
// once what changed since it was built; the caller holds pushMu, with no
// epoch pending (the last push is sealed). What was freed meanwhile is
// skipped.
func (c *groupCache) adoptLocked() {
	c.mu.Lock()
	b := c.apart
	c.apart = builtApart{}
	c.mu.Unlock()
	if len(b.groups) == 0 && len(b.sidecars) == 0 && len(b.inbound) == 0 {
		return
	}
	services := c.meshServicesLocked()
	for _, a := range b.groups {
		if !c.holds(func() bool { return c.groups[a.g] == a.hg }) {
			continue
		}
		// The planner's assignments share their endpoints with the other
		// groups'; equal ones replace the copies without a new version.
		c.write(a.hg.lc, func() error { return a.hg.lc.adopt(c.planner.AddGroup(a.g, services), true) })
	}
	plan := c.view.Load().plan
	cfg := c.planner.Config()
	for _, a := range b.sidecars {
		if !c.holds(func() bool { return c.sidecars[a.id] == a.sc }) {
			continue
		}
		c.writeAdopted(c.envoy.Adopt(a.id, a.node, a.written, services, cfg, a.plan != plan))
		for _, lc := range a.sc.caches {
			c.ledger.Adopted(lc.id)
		}
	}
	c.metrics.routeSets.Set(float64(c.envoy.RouteSets()))
	lookup := c.workloadLookupLocked()
	listeners := c.shared[resourcev3.ListenerType]
	for _, a := range b.inbound {
		if up := c.planner.Inbound(a.names, a.cluster, lookup); len(up) > 0 {
			c.write(listeners, func() error { return listeners.adopt(up, false) })
		}
	}
}

// lockForBuild takes the push lock for a build by the planners, unless a
// push holds it. Builds are serialized (buildMu), so that one stream's
// build does not send another's apart: once buildMu is held, only a push,
// an adoption or a stream's close can hold the push lock. It reports
// false, holding nothing, when one does: the caller builds apart.
func (c *groupCache) lockForBuild() bool {
	c.buildMu.Lock()
	if c.pushMu.TryLock() {
		return true
	}
	c.buildMu.Unlock()
	return false
}

// unlockBuild releases what lockForBuild took.
func (c *groupCache) unlockBuild() {
	c.pushMu.Unlock()
	c.buildMu.Unlock()
}

// writeAdopted writes what the Envoy planner returned for a node it
// adopted, in its order; the caller holds pushMu.
func (c *groupCache) writeAdopted(sp xdsgen.SidecarPlan) {
	if up := sp.Routes.Upsert; len(up) > 0 {
		// Those the node's first stream wrote are most likely equal.
		c.write(c.envoyRoutes, func() error { return c.envoyRoutes.adopt(up, false) })
		sp.Routes = xdsgen.Changes{}
	}
	for _, w := range c.sidecarWrites(sp) {
		c.write(w.cache, func() error { return w.cache.UpdateResources(w.Upsert, w.Delete) })
	}
	c.metrics.routeSets.Set(float64(c.envoy.RouteSets()))
}

// holds reports, under mu, whether ok holds.
func (c *groupCache) holds(ok func() bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ok()
}

// write makes an adoption's write to lc and marks lc adopted. Writing
// only fails for a nil resource, which the generators never make.
func (c *groupCache) write(lc *versioned, do func() error) {
	_ = do()
	c.ledger.Adopted(lc.id)
}
