package xds

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// groupCache routes each watch to the LinearCache that holds its type, and
// for load assignments to the one of the proxy's group. It implements
// cachev3.Cache.
type groupCache struct {
	shared map[string]*trackedCache // by type URL: LDS, RDS, CDS

	// newGroup builds the load assignments of a group that has none yet. It
	// is called with mu held, so a push cannot interleave with it.
	newGroup func(xdsgen.ProxyGroup) map[string]types.Resource

	// inbound builds the server-side listener of an inbound listener name
	// (xdsgen.InboundListenerName), or returns nil for any other name. Such
	// listeners depend only on their name, so they are built on the first
	// watch that names them and then kept in the LDS cache.
	inbound func(name string) types.Resource

	mu  sync.Mutex // guards eds and every trackedCache's current
	eds map[xdsgen.ProxyGroup]*trackedCache
}

// trackedCache is a LinearCache with the resources last written into it,
// so a push compares against them without copying the cache's whole map
// (LinearCache.GetResources) on every change.
type trackedCache struct {
	*cachev3.LinearCache
	current map[string]types.Resource // guarded by groupCache.mu
}

func newTrackedCache(typeURL string, initial map[string]types.Resource) *trackedCache {
	if initial == nil {
		initial = map[string]types.Resource{}
	}
	return &trackedCache{
		LinearCache: cachev3.NewLinearCache(typeURL, cachev3.WithInitialResources(initial)),
		current:     initial,
	}
}

// updateLocked writes up and rm into the cache and remembers them.
// groupCache.mu must be held.
func (t *trackedCache) updateLocked(up map[string]types.Resource, rm []string) error {
	if err := t.UpdateResources(up, rm); err != nil {
		return err
	}
	for n, r := range up {
		t.current[n] = r
	}
	for _, n := range rm {
		delete(t.current, n)
	}
	return nil
}

var _ cachev3.Cache = (*groupCache)(nil)

func newGroupCache(newGroup func(xdsgen.ProxyGroup) map[string]types.Resource) *groupCache {
	c := &groupCache{
		shared:   map[string]*trackedCache{},
		newGroup: newGroup,
		eds:      map[xdsgen.ProxyGroup]*trackedCache{},
	}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType} {
		c.shared[t] = newTrackedCache(t, nil)
	}
	return c
}

func (c *groupCache) pick(typeURL string, node *corev3.Node) (*trackedCache, error) {
	if typeURL == resourcev3.EndpointType {
		return c.group(ProxyGroupOf(node)), nil
	}
	if tc, ok := c.shared[typeURL]; ok {
		return tc, nil
	}
	return nil, fmt.Errorf("xds: type %q is not served", typeURL)
}

// group returns the load-assignment cache of g, creating and filling it
// when it does not exist yet.
func (c *groupCache) group(g xdsgen.ProxyGroup) *trackedCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	tc, ok := c.eds[g]
	if !ok {
		tc = newTrackedCache(resourcev3.EndpointType, c.newGroup(g))
		c.eds[g] = tc
	}
	return tc
}

// groupsLocked calls fn for every group; mu must be held.
func (c *groupCache) groupsLocked(fn func(xdsgen.ProxyGroup, *trackedCache)) {
	for g, tc := range c.eds {
		fn(g, tc)
	}
}

// addInbound puts the subscribed inbound listeners that lc lacks into lc,
// before a watch for them is created, so the watch is answered at once.
func (c *groupCache) addInbound(typeURL string, tc *trackedCache, sub cachev3.Subscription) {
	if typeURL != resourcev3.ListenerType || c.inbound == nil || sub == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range sub.SubscribedResources() {
		if !strings.HasPrefix(n, xdsgen.InboundListenerPrefix) {
			continue
		}
		if _, ok := tc.current[n]; ok {
			continue
		}
		if r := c.inbound(n); r != nil {
			// Updating only fails for a nil resource.
			_ = tc.updateLocked(map[string]types.Resource{n: r}, nil)
		}
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

func (c *groupCache) Fetch(ctx context.Context, req *cachev3.Request) (cachev3.Response, error) {
	lc, err := c.pick(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	return lc.Fetch(ctx, req)
}
