package xdsgen

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshfed/meshfed/pkg/model"
)

// connectTimeout is the clusters' connect timeout. grpc-go ignores it (it uses
// the dial's own deadline), but Envoy's validation requires a positive value.
const connectTimeout = 10 * time.Second

// Clusters returns one EDS cluster per port of svc, sorted by port, named
// ClusterName. Each fetches its endpoints over ADS under the EDS service name
// ClusterName (the name LoadAssignments gives its result) and balances round
// robin, which grpc-go runs as locality-weighted round robin. Clusters is
// pure; a nil svc yields nil.
func Clusters(svc *model.Service) []*clusterv3.Cluster {
	ports := servicePorts(svc)
	if len(ports) == 0 {
		return nil
	}
	out := make([]*clusterv3.Cluster, 0, len(ports))
	for _, p := range ports {
		name := ClusterName(svc.Hostname, p.Port)
		out = append(out, &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
				EdsConfig:   adsConfigSource(),
				ServiceName: name,
			},
			LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
			ConnectTimeout: durationpb.New(connectTimeout),
		})
	}
	return out
}
