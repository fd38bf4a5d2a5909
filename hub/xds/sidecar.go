package xds

import (
	"fmt"
	"net/netip"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// envoyUserAgent is the user_agent_name Envoy puts in its node.
const envoyUserAgent = "envoy"

// isEnvoy reports whether node is an Envoy proxy (Istio's sidecar data
// plane, run by pilot-agent) rather than a proxyless gRPC client. Envoy
// names itself in user_agent_name; proxyless clients bootstrapped by
// Istio's agent also say GENERATOR=grpc, which wins.
func isEnvoy(node *corev3.Node, md xdsnode.Metadata) bool {
	return node.GetUserAgentName() == envoyUserAgent && md.Generator != xdsnode.GeneratorGRPC
}

// sidecarOf reads from an Envoy node what the generator needs: the pod's
// IP (the node ID's second field, else the first of INSTANCE_IPS), its
// namespace (metadata NAMESPACE, else the node ID's), how its traffic
// reaches Envoy (INTERCEPTION_MODE, REDIRECT when unset) and whether it
// is a gateway (node type router).
func sidecarOf(node *corev3.Node, md xdsnode.Metadata) (xdsgen.Sidecar, model.ClusterID, error) {
	id, err := xdsnode.ParseID(node.GetId())
	if err != nil {
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node: %w", err)
	}
	ipText := id.IP
	if ipText == "" {
		ipText, _, _ = strings.Cut(md.InstanceIPs, ",")
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil {
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node %q has no usable IP (node ID or %s): %w",
			node.GetId(), xdsnode.MetadataInstanceIPs, err)
	}
	sc := xdsgen.Sidecar{IP: ip, Namespace: md.Namespace, Interception: xdsgen.InterceptRedirect,
		Router: id.Type == xdsnode.TypeRouter}
	if sc.Namespace == "" {
		sc.Namespace = id.Namespace
	}
	switch m := xdsgen.Interception(md.InterceptionMode); m {
	case "":
	case xdsgen.InterceptRedirect, xdsgen.InterceptTProxy, xdsgen.InterceptNone:
		sc.Interception = m
	default:
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node %q: unknown %s %q (want %s, %s or %s)",
			node.GetId(), xdsnode.MetadataInterceptionMode, m,
			xdsgen.InterceptRedirect, xdsgen.InterceptTProxy, xdsgen.InterceptNone)
	}
	return sc, md.ClusterID, nil
}

// sidecar is the hub's part of one Envoy proxy (one node ID), held while
// one of its streams is open: its own caches of listeners and clusters
// (xdsgen.SidecarTypes; a gateway's routes too, xdsgen.RouterTypes), whose content the groupCache's SidecarPlanner
// plans once it has adopted the node.
type sidecar struct {
	members int // open streams of the node; guarded by groupCache.mu
	// ready is closed once the node's first stream built err or caches
	// (buildSidecar), which are fixed from then on.
	ready  chan struct{}
	err    error // a node the hub cannot serve; its watches fail with it
	caches map[string]*versioned
	// creds are the node's credentials (SDS secrets); nil when the
	// server serves none. Set with caches.
	creds *nodeCredentials
}

// newSidecarCaches returns the caches of an Envoy node, one per type of
// built (xdsgen.Sidecar.Types), holding built (by type URL): built apart from the planner from the configuration of epoch,
// or by it under the push lock (apart false; epoch is then unused).
func newSidecarCaches(l *xdsstatus.Ledger, built map[string]map[string]types.Resource, epoch uint64, apart bool) map[string]*versioned {
	caches := map[string]*versioned{}
	for t := range built {
		if apart {
			caches[t] = newCacheAt(l, t, built[t], epoch)
		} else {
			caches[t] = newCache(l, t, built[t])
		}
	}
	caches[resourcev3.ClusterType].rewarmsOf = rewarmsOf
	return caches
}

// release gives the sidecar's caches back to l: it is freed.
func (s *sidecar) release(l *xdsstatus.Ledger) {
	for _, lc := range s.caches {
		l.Release(lc.id)
	}
	if s.creds != nil {
		s.creds.close()
		l.Release(s.creds.cache.id)
	}
}

// rewarmsOf names the load assignment that an Envoy EDS cluster warms
// with, "" for another resource. Envoy keeps an updated EDS cluster
// warming, on its old version, until it is sent the cluster's load
// assignment again, even an unchanged one (it does not ask again for a
// name it is subscribed to): the stream server sends it after the
// cluster (ads.Rewarming).
func rewarmsOf(r types.Resource) string {
	c, ok := r.(*clusterv3.Cluster)
	if !ok || c.GetType() != clusterv3.Cluster_EDS {
		return ""
	}
	if name := c.GetEdsClusterConfig().GetServiceName(); name != "" {
		return name
	}
	return c.GetName()
}

// rewarmed returns a resource that means what r means in other bytes: for
// a load assignment, the overprovisioning factor set to Envoy's default
// where it was unset, or unset where it was set; any other resource as it
// is. It is what a stream that holds a load assignment is sent when it is
// to be sent it again (ads.Hints.Outdated): go-control-plane versions a
// Delta resource by a hash of it, and a proxy may take nothing again in a
// version it has (seen with pilot-agent's Delta xDS: the cluster stayed
// warming until the bytes differed).
func rewarmed(r types.Resource) types.Resource {
	cla, ok := r.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return r
	}
	out := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	if out.Policy == nil {
		out.Policy = &endpointv3.ClusterLoadAssignment_Policy{}
	}
	if out.Policy.OverprovisioningFactor == nil {
		out.Policy.OverprovisioningFactor = wrapperspb.UInt32(envoyOverprovisioningFactor)
	} else {
		out.Policy.OverprovisioningFactor = nil
	}
	return out
}

// envoyOverprovisioningFactor is Envoy's default overprovisioning factor
// (ClusterLoadAssignment.Policy.overprovisioning_factor), in percent.
const envoyOverprovisioningFactor = 140
