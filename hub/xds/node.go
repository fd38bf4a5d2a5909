package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// ProxyGroupOf returns the group of proxies that get the same load
// assignments as node: same cluster (CLUSTER_ID metadata), same region.
func ProxyGroupOf(node *corev3.Node) xdsgen.ProxyGroup {
	return xdsgen.ProxyGroup{
		Region:  node.GetLocality().GetRegion(),
		Cluster: xdsnode.ClusterOf(node.GetMetadata()),
	}
}
