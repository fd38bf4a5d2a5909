package xds

import (
	"net/netip"

	"github.com/meshfed/meshfed/pkg/model"
)

// workloadAt returns the namespace and Pod labels of the workload at ip in
// cluster, as the registry knows it: from the first endpoint with that
// address among services (Pods live in their Service's namespace). ok is
// false while no service has such an endpoint (a Pod no Service selects,
// or one whose EndpointSlice has not arrived yet).
func workloadAt(services []*model.MergedService, cluster model.ClusterID, ip netip.Addr) (ns string, labels model.Labels, ok bool) {
	ip = ip.Unmap()
	for _, ms := range services {
		for i := range ms.Endpoints {
			e := &ms.Endpoints[i]
			if e.Cluster == cluster && e.Address.Unmap() == ip {
				return ms.Service.Namespace, e.Labels, true
			}
		}
	}
	return "", model.Labels{}, false
}
