package xdsgen

import (
	"net/netip"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Workload is what policy and routing know of a workload: its namespace
// and its labels.
type Workload struct {
	Namespace string
	Labels    model.Labels
}

// podKey names a Pod by its address in its cluster.
type podKey struct {
	cluster model.ClusterID
	ip      netip.Addr
}

// Pods indexes the Pods behind the registry's endpoints. The registry
// knows a Pod only through the endpoints of the Services that select it.
type Pods map[podKey]Workload

// IndexPods indexes the Pods of services' endpoints; of several endpoints
// of one Pod, the first in services' order gives its namespace.
func IndexPods(services []*model.MergedService) Pods {
	x := Pods{}
	for _, ms := range services {
		for i := range ms.Endpoints {
			e := &ms.Endpoints[i]
			k := podKey{e.Cluster, e.Address.Unmap()}
			if _, ok := x[k]; !ok {
				x[k] = Workload{ms.Service.Namespace, e.Labels}
			}
		}
	}
	return x
}

// Security returns the security policy and the Sidecar scope, under cfg,
// of the workload at ip in cluster: by the Pod the registry has there,
// else by fallbackNS (its node's namespace, when it names one) without
// labels, whose namespace-wide and mesh-wide policies then apply.
func (x Pods) Security(cfg *istioconfig.Snapshot, cluster model.ClusterID, ip netip.Addr, fallbackNS string) (istioconfig.WorkloadSecurity, *istioconfig.Sidecar) {
	p, ok := x[podKey{cluster, ip.Unmap()}]
	if !ok {
		p = Workload{Namespace: fallbackNS}
	}
	return cfg.Workload(p.Namespace, p.Labels), cfg.SidecarScope(p.Namespace, p.Labels)
}

// RouteClass returns the route class, under cfg, of the client at ip in
// cluster: by the Pod the registry has there, else by fallback (its
// node's namespace and LABELS metadata). Unlike policy, which an unknown
// Pod gets only the namespace's of, routing may trust the node: a class
// decides which routes a client takes, never what it may reach.
func (x Pods) RouteClass(cfg *istioconfig.Snapshot, cluster model.ClusterID, ip netip.Addr, fallback Workload) istioconfig.RouteClass {
	if !cfg.HasSourceRules() {
		return istioconfig.RouteClass{}
	}
	p, ok := x[podKey{cluster, ip.Unmap()}]
	if !ok {
		p = fallback
	}
	return cfg.RouteClass(p.Namespace, p.Labels)
}

// Workload returns the workload at ip in cluster: the Pod the registry
// has there, else fallback (its node's namespace and LABELS metadata). A
// gateway's labels select its Gateways: the Pod's labels decide where the
// registry knows it, as for route classes.
func (x Pods) Workload(cluster model.ClusterID, ip netip.Addr, fallback Workload) Workload {
	if p, ok := x[podKey{cluster, ip.Unmap()}]; ok {
		return p
	}
	return fallback
}

// Any reports whether some Pod's workload satisfies ok.
func (x Pods) Any(ok func(Workload) bool) bool {
	for _, w := range x {
		if ok(w) {
			return true
		}
	}
	return false
}
