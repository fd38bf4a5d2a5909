package xdsgen

import (
	"net/netip"

	"github.com/meshfed/meshfed/pkg/model"
)

// Sidecar fixtures: echo (HTTP 8080 → 8081, gRPC 7070 → 7071) with
// endpoints in cluster-1 and cluster-2, and tcp-echo (TCP 9000 → 9001) in
// cluster-1. The pod 10.1.0.1 in cluster-1 backs both, so its sidecar
// serves 7071, 8081 and 9001.

var sidecarPodIP = netip.MustParseAddr("10.1.0.1")

func sidecarEcho() *model.MergedService {
	svc := &model.Service{
		Hostname:  "echo.demo.svc.cluster.local",
		Name:      "echo",
		Namespace: "demo",
		Ports: []model.ServicePort{
			{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP},
			{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC},
		},
	}
	ports := map[string]uint32{"http": 8081, "grpc": 7071}
	return mergedOf(svc,
		model.Endpoint{Cluster: "cluster-1", Address: sidecarPodIP, Ready: true, ServiceAccount: "echo", Pod: "echo-1", Ports: ports, Locality: usEast1a},
		model.Endpoint{Cluster: "cluster-2", Address: netip.MustParseAddr("10.2.0.1"), Ready: true, ServiceAccount: "echo", Pod: "echo-2", Ports: ports, Locality: usEast1a},
	)
}

func sidecarTCPEcho() *model.MergedService {
	svc := &model.Service{
		Hostname:  "tcp-echo.demo.svc.cluster.local",
		Name:      "tcp-echo",
		Namespace: "demo",
		Ports:     []model.ServicePort{{Name: "tcp", Port: 9000, Protocol: model.ProtocolTCP}},
	}
	return mergedOf(svc,
		model.Endpoint{Cluster: "cluster-1", Address: sidecarPodIP, Ready: true, ServiceAccount: "tcp-echo", Pod: "echo-1", Ports: map[string]uint32{"tcp": 9001}},
	)
}

// sidecarServices is the fixture's view, in the registry's arbitrary order.
func sidecarServices() []*model.MergedService {
	return []*model.MergedService{sidecarTCPEcho(), sidecarEcho()}
}

// sidecarOf is the fixture pod's sidecar in mode m.
func sidecarOf(m Interception) Sidecar {
	return Sidecar{
		IP:           sidecarPodIP,
		Namespace:    "demo",
		Interception: m,
		Inbound:      SidecarInbound(sidecarServices(), "cluster-1", sidecarPodIP),
	}
}

// mergedOf builds a MergedService of svc the way model.Registry does.
func mergedOf(svc *model.Service, eps ...model.Endpoint) *model.MergedService {
	ms := &model.MergedService{Service: svc, Endpoints: eps}
	model.SortEndpoints(ms.Endpoints)
	for _, e := range ms.Endpoints {
		if len(ms.Clusters) == 0 || ms.Clusters[len(ms.Clusters)-1] != e.Cluster {
			ms.Clusters = append(ms.Clusters, e.Cluster)
		}
	}
	return ms
}

// svcOn is a service name.ns with one port of protocol p, and no endpoints.
func svcOn(name, ns string, port uint32, p model.Protocol) *model.MergedService {
	return mergedOf(&model.Service{
		Hostname:  model.ServiceHostname(name, ns, ""),
		Name:      name,
		Namespace: ns,
		Ports:     []model.ServicePort{{Name: "p", Port: port, Protocol: p}},
	})
}
