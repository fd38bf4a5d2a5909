package xds

import (
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
// watch is created.
func (c *groupCache) attach(cur attachment, node *corev3.Node, md xdsnode.Metadata) attachment {
	a := attachmentOf(node, md)
	if cur.same(a) {
		return cur
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detachLocked(cur)
	c.attached++
	c.members[a.group]++
	if a.sidecar != "" {
		c.attachSidecarLocked(a.sidecar, node, md)
		a.sc = c.sidecars[a.sidecar]
	}
	return a
}

// attachSidecarLocked counts one more stream of the Envoy node, adding
// it to the Envoy planner and building its caches when it is the first.
// The shared routes the node brings (a new route set, or all of them for
// the first sidecar: no push maintains them while there is none) are
// written at once.
func (c *groupCache) attachSidecarLocked(id string, node *corev3.Node, md xdsnode.Metadata) {
	if sc := c.sidecars[id]; sc != nil {
		sc.members++
		return
	}
	proxy, cluster, err := sidecarOf(node, md)
	sc := &sidecar{err: err}
	if err == nil {
		n := xdsgen.SidecarNode{Proxy: proxy, Cluster: cluster,
			Claimed: xdsgen.Workload{Namespace: proxy.Namespace, Labels: model.NewLabels(md.Labels)}}
		initial, routes := c.envoy.Add(id, n, c.meshServicesLocked(), c.planner.Config())
		sc = newSidecar(c.ledger, initial)
		c.writeRoutesLocked(routes)
	}
	sc.members = 1
	c.sidecars[id] = sc
	c.metrics.sidecars.Set(float64(len(c.sidecars)))
}

// writeRoutesLocked writes changes of the shared Envoy routes made outside
// a push (a sidecar's arrival or departure), and updates the route-set
// gauge.
func (c *groupCache) writeRoutesLocked(ch xdsgen.Changes) {
	c.metrics.routeSets.Set(float64(c.envoy.RouteSets()))
	if !ch.Empty() {
		// Updating only fails for a nil resource.
		_ = c.envoyRoutes.UpdateResources(ch.Upsert, ch.Delete)
	}
}

// attachmentOf is what a stream of node, whose metadata is md, is
// attached to.
func attachmentOf(node *corev3.Node, md xdsnode.Metadata) attachment {
	a := attachment{group: proxyGroupOf(node, md.ClusterID), valid: true}
	if isEnvoy(node, md) {
		a.sidecar = node.GetId()
	}
	return a
}

// attachmentOfWatch is the attachment of the stream of a watch, and its
// conn: the conn's, else (a watch from elsewhere, as tests make) its
// node's and nil.
func attachmentOfWatch(sub cachev3.Subscription, node *corev3.Node) (attachment, *conn) {
	if cn, ok := ads.StreamOf(sub).(*conn); ok && cn.attached.valid {
		return cn.attached, cn
	}
	return attachmentOf(node, xdsnode.MetadataOf(node.GetMetadata())), nil
}

// detach forgets a stream attached to a, freeing its group (and sidecar)
// when it was the last stream of it. Call it when the stream closes.
func (c *groupCache) detach(a attachment) {
	if !a.valid {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detachLocked(a)
}

// detachLocked is detach with mu held.
func (c *groupCache) detachLocked(a attachment) {
	if !a.valid {
		return
	}
	c.attached--
	if sc := c.sidecars[a.sidecar]; sc != nil {
		if sc.members--; sc.members == 0 {
			delete(c.sidecars, a.sidecar)
			sc.release(c.ledger)
			c.metrics.sidecars.Set(float64(len(c.sidecars)))
			if sc.err == nil {
				c.writeRoutesLocked(c.envoy.Remove(a.sidecar, c.meshServicesLocked(), c.planner.Config()))
			}
		}
	}
	g := a.group
	if c.members[g]--; c.members[g] > 0 {
		return
	}
	delete(c.members, g)
	// The group's streams are gone, and with them their watches on lc.
	c.ledger.release(c.eds[g])
	delete(c.eds, g)
	c.planner.ForgetGroup(g)
	c.metrics.groups.Set(float64(len(c.eds)))
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
	c.mu.Lock()
	defer c.mu.Unlock()
	return heldGroups{
		caches:   len(c.eds),
		streams:  c.attached,
		members:  len(c.members),
		planned:  len(c.planner.Groups()),
		memoized: c.planner.MemoizedGroups(),
		sidecars: len(c.sidecars),
	}
}
