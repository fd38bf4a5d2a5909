package xds

import (
	"net/netip"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// addInbound puts the subscribed inbound listeners that lc lacks into lc,
// before a watch for them is created, so the watch is answered at once.
// Each is built apart from the planner, under the policy that the view's
// configuration gives the workload at its address in the cluster of the
// server asking; the push loop adopts them (adoptLocked).
func (c *groupCache) addInbound(typeURL string, cluster model.ClusterID, lc *versioned, sub cachev3.Subscription) {
	if typeURL != resourcev3.ListenerType || sub == nil {
		return
	}
	var names []string
	for n := range sub.SubscribedResources() {
		if strings.HasPrefix(n, xdsnode.InboundListenerPrefix) && !lc.has(n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	if c.lockForBuild() {
		// No push in progress: the planner builds them at once.
		// Written before the lock is released, so that a push's refresh
		// of one of them lands after.
		if up := c.planner.Inbound(names, cluster, c.workloadLookupLocked()); len(up) > 0 {
			// Updating only fails for a nil resource.
			_ = lc.UpdateResources(up, nil)
		}
		c.unlockBuild()
		return
	}
	v := c.view.Load()
	lookup := workloadLookup(func() []*model.MergedService { return meshServices(c.services(), v.cfg) }, v.cfg)
	up := map[string]types.Resource{}
	for _, n := range names {
		addr, err := xdsgen.ParseInboundListenerName(n)
		if err != nil {
			continue
		}
		up[n] = xdsgen.InboundListener(addr, lookup(cluster, addr.Addr()), c.opts)
	}
	if len(up) == 0 {
		return
	}
	// Updating only fails for a nil resource.
	_ = lc.UpdateResources(up, nil)
	c.queue(func(b *builtApart) { b.inbound = append(b.inbound, apartInbound{names: names, cluster: cluster}) })
}

// workloadLookupLocked returns the policy lookup of proxyless servers'
// inbound listeners under the planner's configuration (workloadLookup).
// The caller holds pushMu.
func (c *groupCache) workloadLookupLocked() xdsgen.WorkloadLookup {
	return workloadLookup(c.meshServicesLocked, c.planner.Config())
}

// workloadLookup returns the policy lookup of proxyless servers' inbound
// listeners: by the Pod of services at the address (xdsgen.IndexPods),
// under cfg; a Pod the registry does not know gets mesh-wide policy.
// services are read and indexed on the first call, so a refresh of many
// listeners reads them once.
func workloadLookup(services func() []*model.MergedService, cfg *istioconfig.Snapshot) xdsgen.WorkloadLookup {
	var x xdsgen.Pods
	return func(cluster model.ClusterID, ip netip.Addr) istioconfig.WorkloadSecurity {
		if x == nil {
			x = xdsgen.IndexPods(services())
		}
		sec, _ := x.Security(cfg, cluster, ip, "")
		return sec
	}
}

// refreshInboundLocked returns the inbound listeners that a push changes:
// every one whose policy changed when the security configuration did,
// else those at the addresses of the updated services' endpoints (a Pod
// the registry learns of, or whose labels change).
func (c *groupCache) refreshInboundLocked(updates []xdsgen.ServiceUpdate, secChanged bool) map[string]types.Resource {
	if c.planner.InboundCount() == 0 {
		return nil
	}
	var ips map[netip.Addr]bool
	if !secChanged {
		ips = map[netip.Addr]bool{}
		for _, u := range updates {
			if u.Service == nil {
				continue
			}
			for i := range u.Service.Endpoints {
				ips[u.Service.Endpoints[i].Address.Unmap()] = true
			}
		}
		if len(ips) == 0 {
			return nil
		}
	}
	return c.planner.RefreshInbound(ips, c.workloadLookupLocked())
}
