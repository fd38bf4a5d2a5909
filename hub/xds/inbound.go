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
)

// addInbound puts the subscribed inbound listeners that lc lacks into lc,
// before a watch for them is created, so the watch is answered at once.
// Each is built under the policy of the workload at its address in the
// cluster of the server asking.
func (c *groupCache) addInbound(typeURL string, cluster model.ClusterID, lc *versioned, sub cachev3.Subscription) {
	if typeURL != resourcev3.ListenerType || sub == nil {
		return
	}
	names := make([]string, 0, len(sub.SubscribedResources()))
	for n := range sub.SubscribedResources() {
		if strings.HasPrefix(n, xdsgen.InboundListenerPrefix) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if up := c.planner.Inbound(names, cluster, c.workloadLookupLocked()); len(up) > 0 {
		// Updating only fails for a nil resource.
		_ = lc.UpdateResources(up, nil)
	}
}

// workloadLookupLocked returns the policy lookup of proxyless servers'
// inbound listeners: by the registry's Pod at the address (xdsgen.IndexPods),
// under the planner's configuration; a Pod the registry does not know
// gets mesh-wide policy. The registry is indexed on the first call, so a
// refresh of many listeners reads it once.
func (c *groupCache) workloadLookupLocked() xdsgen.WorkloadLookup {
	var x xdsgen.Pods
	cfg := c.planner.Config()
	return func(cluster model.ClusterID, ip netip.Addr) istioconfig.WorkloadSecurity {
		if x == nil {
			x = xdsgen.IndexPods(c.meshServicesLocked())
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
