package xdsgen

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// connectTimeout is the clusters' connect timeout. grpc-go ignores it (it uses
// the dial's own deadline), but Envoy's validation requires a positive value.
const connectTimeout = 10 * time.Second

// Clusters returns the clusters of a proxyless gRPC client for svc under
// DestinationRule dr (nil: none), sorted by name: per port of svc the
// default cluster ClusterName and one SubsetClusterName per subset of dr.
// Each fetches its endpoints over ADS under its own name as EDS service name
// (the names LoadAssignments gives its results) and balances round robin,
// which grpc-go runs as locality-weighted round robin, unless dr's effective
// traffic policy for the port and subset says otherwise (what grpc-go
// accepts of it is translated; ClusterNotes(ProxyGRPC, dr) says what is left
// out). A DNS-resolved svc (model.ResolutionDNS or ResolutionDNSRoundRobin)
// gets, under the same names, LOGICAL_DNS clusters to its first DNS
// endpoint instead (grpc-go has no STRICT_DNS; see dns.go and
// ServiceNotes), subset clusters alike, DNS endpoints having no labels.
// With a nil dr the result depends on svc alone. Clusters is pure; a nil
// svc yields nil.
func Clusters(svc *model.Service, dr *istioconfig.DestinationRule) []*clusterv3.Cluster {
	ports := servicePorts(svc)
	if len(ports) == 0 {
		return nil
	}
	subsets := subsetNames(dr)
	out := make([]*clusterv3.Cluster, 0, len(ports)*(1+len(subsets)))
	for _, p := range ports {
		out = append(out, proxylessCluster(svc, p, "", dr))
		for _, s := range subsets {
			out = append(out, proxylessCluster(svc, p, s, dr))
		}
	}
	sortByName(out)
	return out
}

// proxylessCluster is the cluster of subset ("" for the whole service) of
// port sp of svc for grpc-go: EDS, or LOGICAL_DNS for a DNS-resolved svc.
func proxylessCluster(svc *model.Service, sp model.ServicePort, subset string, dr *istioconfig.DestinationRule) *clusterv3.Cluster {
	port := sp.Port
	name := SubsetClusterName(svc.Hostname, port, subset)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsConfigSource(),
			ServiceName: name,
		},
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout: durationpb.New(connectTimeout),
	}
	if dnsResolved(svc) {
		setDNS(c, svc, sp, ProxyGRPC)
	}
	applyPolicy(c, effectivePolicy(dr, port, subset), ProxyGRPC, false, discard)
	return c
}
