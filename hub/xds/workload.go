package xds

import (
	"net/netip"

	"github.com/meshfed/meshfed/pkg/istioconfig"
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

// workloadSecurity returns the security policy of the workload at ip in
// cluster under cfg; fallbackNS is its namespace when the registry does
// not know it yet (a sidecar's node names it), whose namespace-wide and
// mesh-wide policies then apply.
func workloadSecurity(services []*model.MergedService, cfg *istioconfig.Snapshot, cluster model.ClusterID, ip netip.Addr, fallbackNS string) istioconfig.WorkloadSecurity {
	ns, labels, ok := workloadAt(services, cluster, ip)
	if !ok {
		ns = fallbackNS
	}
	return cfg.Workload(ns, labels)
}
