package xds

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// attachment is what one stream is attached to, kept in its conn: its
// proxy group's load assignments and, for an Envoy sidecar, its node's
// state. The zero attachment is none.
type attachment struct {
	group   xdsgen.ProxyGroup
	sidecar string // node ID of an Envoy stream; "" for proxyless gRPC
	valid   bool
	// sc is the sidecar's state, set by attach: held while the stream
	// is attached, its caches fixed, so a watch reads them without mu.
	sc *sidecar
}

// same reports whether a and b attach to the same group and sidecar.
func (a attachment) same(b attachment) bool {
	return a.valid == b.valid && a.group == b.group && a.sidecar == b.sidecar
}

// attach moves a stream attached to cur (perhaps none) to the group of
// node, and returns its attachment, for the stream to keep. Call it for
// every request whose node is new to the stream, before the request's
// watch is created. The first stream of an Envoy node builds the node's
// caches (buildSidecar); the node's other streams wait for that build,
// none for a push.
func (c *groupCache) attach(cur attachment, node *corev3.Node, md xdsnode.Metadata) attachment {
	a := c.attachmentOf(node, md)
	if cur.same(a) {
		return cur
	}
	c.detach(cur)
	c.mu.Lock()
	c.attached++
	hg := c.groups[a.group]
	if hg == nil {
		hg = &heldGroup{}
		c.groups[a.group] = hg
	}
	hg.members++
	build := false
	if a.sidecar != "" {
		a.sc = c.sidecars[a.sidecar]
		if a.sc == nil {
			a.sc = &sidecar{ready: make(chan struct{})}
			c.sidecars[a.sidecar] = a.sc
			c.metrics.sidecars.Set(float64(len(c.sidecars)))
			build = true
		}
		a.sc.members++
	}
	c.mu.Unlock()
	if build {
		c.buildSidecar(a.sidecar, a.sc, node, md)
	}
	if a.sc != nil {
		<-a.sc.ready
	}
	return a
}

// attachmentOf is what a stream of node, whose metadata is md, is
// attached to: its group on its network, or its cluster's.
func (c *groupCache) attachmentOf(node *corev3.Node, md xdsnode.Metadata) attachment {
	var clusterNetwork model.Network
	if md.Network == "" && c.clusterNetwork != nil {
		clusterNetwork = c.clusterNetwork(md.ClusterID)
	}
	a := attachment{group: proxyGroupOf(node, md, clusterNetwork), valid: true}
	if isEnvoy(node, md) {
		a.sidecar = node.GetId()
	}
	return a
}

// attachmentOfWatch is the attachment of the stream of a watch, and its
// conn: the conn's, else (a watch from elsewhere, as tests make) its
// node's and nil.
func (c *groupCache) attachmentOfWatch(sub cachev3.Subscription, node *corev3.Node) (attachment, *conn) {
	if cn, ok := ads.StreamOf(sub).(*conn); ok && cn.attached.valid {
		return cn.attached, cn
	}
	return c.attachmentOf(node, xdsnode.MetadataOf(node.GetMetadata())), nil
}

// detach forgets a stream attached to a, freeing its group (and sidecar)
// when it was the last stream of it. Call it when the stream closes. It
// takes the push lock: freeing a group or node changes the planners.
func (c *groupCache) detach(a attachment) {
	if !a.valid {
		return
	}
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	c.mu.Lock()
	c.attached--
	var goneSidecar *sidecar
	if sc := c.sidecars[a.sidecar]; sc != nil {
		if sc.members--; sc.members == 0 {
			delete(c.sidecars, a.sidecar)
			c.metrics.sidecars.Set(float64(len(c.sidecars)))
			goneSidecar = sc
		}
	}
	g := a.group
	hg := c.groups[g]
	goneGroup := hg != nil && hg.members == 1
	if hg != nil {
		hg.members--
	}
	if goneGroup {
		delete(c.groups, g)
		c.metrics.groups.Set(float64(c.builtGroupsLocked()))
	}
	c.mu.Unlock()
	if goneSidecar != nil {
		<-goneSidecar.ready
		goneSidecar.release(c.ledger)
		if goneSidecar.err == nil {
			// A node not adopted yet is not the planner's: no change.
			if ch := c.envoy.Remove(a.sidecar, c.meshServicesLocked(), c.planner.Config()); !ch.Empty() {
				c.write(c.envoyRoutes, func() error { return c.envoyRoutes.UpdateResources(ch.Upsert, ch.Delete) })
			}
			c.metrics.routeSets.Set(float64(c.envoy.RouteSets()))
		}
	}
	if goneGroup {
		// The group's streams are gone, and with them their watches on
		// its cache; one of them may still be building it.
		if hg.ready != nil {
			<-hg.ready
			c.ledger.Release(hg.lc.id)
		}
		c.planner.ForgetGroup(g)
	}
}

// adopted reports whether the planners hold group g and, unless id is
// "", Envoy node id.
func (c *groupCache) adopted(g xdsgen.ProxyGroup, id string) bool {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	return slices.Contains(c.planner.Groups(), g) && (id == "" || c.envoy.Node(id) != nil)
}

// heldGroups counts what a groupCache holds per proxy group and stream.
type heldGroups struct {
	caches   int // load-assignment watch caches
	streams  int // streams attached to a group
	members  int // groups with an attached stream
	planned  int // groups the planner tracks
	memoized int // groups the generation cache memoizes assignments for
	sidecars int // Envoy nodes with their own caches
}

// held reports what the cache holds for proxy groups; every count falls to
// zero when every proxy has left.
func (c *groupCache) held() heldGroups {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	members := 0
	for _, hg := range c.groups {
		if hg.members > 0 {
			members++
		}
	}
	return heldGroups{
		caches:   c.builtGroupsLocked(),
		streams:  c.attached,
		members:  members,
		planned:  len(c.planner.Groups()),
		memoized: c.planner.MemoizedGroups(),
		sidecars: len(c.sidecars),
	}
}
