package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// ProxyGroupOf returns the group of proxies that get the same load
// assignments as node: same cluster (CLUSTER_ID metadata), same locality
// (region, zone, sub-zone: a DestinationRule's distribute tells zones
// apart; without one, zones share the build, see xdsgen.Cache).
func ProxyGroupOf(node *corev3.Node) xdsgen.ProxyGroup {
	return proxyGroupOf(node, xdsnode.ClusterOf(node.GetMetadata()))
}

// proxyGroupOf is ProxyGroupOf with the node's cluster read already.
func proxyGroupOf(node *corev3.Node, cluster model.ClusterID) xdsgen.ProxyGroup {
	return xdsgen.ProxyGroup{
		Cluster: cluster,
		Region:  node.GetLocality().GetRegion(),
		Zone:    node.GetLocality().GetZone(),
		SubZone: node.GetLocality().GetSubZone(),
	}
}
