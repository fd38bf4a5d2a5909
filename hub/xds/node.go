package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// Node metadata keys, as Istio's proxies and meshfed's agent set them.
const (
	MetadataClusterID = "CLUSTER_ID"
	MetadataNamespace = "NAMESPACE"
	MetadataNetwork   = "NETWORK"
	MetadataLabels    = "LABELS"
)

// ProxyGroupOf returns the group of proxies that get the same load
// assignments as node: same cluster, same region.
func ProxyGroupOf(node *corev3.Node) xdsgen.ProxyGroup {
	g := xdsgen.ProxyGroup{Region: node.GetLocality().GetRegion()}
	if f := node.GetMetadata().GetFields()[MetadataClusterID]; f != nil {
		g.Cluster = model.ClusterID(f.GetStringValue())
	}
	return g
}
