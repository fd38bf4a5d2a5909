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
//
// Its network is its NETWORK metadata; ProxyGroupOf knows no cluster's
// network (proxyGroupOf does).
func ProxyGroupOf(node *corev3.Node) xdsgen.ProxyGroup {
	return proxyGroupOf(node, xdsnode.MetadataOf(node.GetMetadata()), "")
}

// proxyGroupOf is ProxyGroupOf with the node's metadata read already and
// the network of its cluster, clusterNetwork, for a node that says none.
// A router on a known network is an east-west group
// (xdsgen.ProxyGroup.EastWest).
func proxyGroupOf(node *corev3.Node, md xdsnode.Metadata, clusterNetwork model.Network) xdsgen.ProxyGroup {
	g := xdsgen.ProxyGroup{
		Cluster: md.ClusterID,
		Region:  node.GetLocality().GetRegion(),
		Zone:    node.GetLocality().GetZone(),
		SubZone: node.GetLocality().GetSubZone(),
		Network: model.Network(md.Network),
	}
	if g.Network == "" {
		g.Network = clusterNetwork
	}
	if g.Network != "" {
		id, err := xdsnode.ParseID(node.GetId())
		g.EastWest = err == nil && id.Type == xdsnode.TypeRouter
	}
	return g
}
