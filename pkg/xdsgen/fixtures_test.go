package xdsgen

import (
	"net/netip"

	"github.com/meshfed/meshfed/pkg/model"
)

// Test fixtures: the service echo in namespace demo with a gRPC and an HTTP
// port, and endpoints in three clusters: cluster-1 and cluster-2 in us-east,
// cluster-3 in eu-west.

const echoHost = model.Hostname("echo.demo.svc.cluster.local")

func echoService() *model.Service {
	return &model.Service{
		Hostname:  echoHost,
		Name:      "echo",
		Namespace: "demo",
		Ports: []model.ServicePort{
			{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC},
			{Name: "http", Port: 9090, Protocol: model.ProtocolHTTP},
		},
	}
}

var (
	usEast1a = model.Locality{Region: "us-east", Zone: "us-east-1a"}
	usEast1b = model.Locality{Region: "us-east", Zone: "us-east-1b"}
	usEast1c = model.Locality{Region: "us-east", Zone: "us-east-1c", SubZone: "rack-7"}
	euWest1a = model.Locality{Region: "eu-west", Zone: "eu-west-1a"}
)

// ep returns an endpoint serving both echo ports (grpc on 50051, http on
// 8081) unless ports are given as name, number pairs.
func ep(c model.ClusterID, addr string, loc model.Locality, ready bool, ports ...any) model.Endpoint {
	pm := map[string]uint32{"grpc": 50051, "http": 8081}
	if len(ports) > 0 {
		pm = map[string]uint32{}
		for i := 0; i+1 < len(ports); i += 2 {
			pm[ports[i].(string)] = uint32(ports[i+1].(int))
		}
	}
	return model.Endpoint{
		Cluster:  c,
		Address:  netip.MustParseAddr(addr),
		Locality: loc,
		Ready:    ready,
		Pod:      "echo-" + addr,
		Ports:    pm,
	}
}

// merged builds a MergedService of echo the way model.Registry does.
func merged(eps ...model.Endpoint) *model.MergedService {
	ms := &model.MergedService{Service: echoService(), Endpoints: eps}
	model.SortEndpoints(ms.Endpoints)
	seen := map[model.ClusterID]bool{}
	for _, e := range eps {
		if !seen[e.Cluster] {
			seen[e.Cluster] = true
			ms.Clusters = append(ms.Clusters, e.Cluster)
		}
	}
	return ms
}

// fleet is the three-cluster endpoint set; cluster1Ready says whether
// cluster-1's endpoints are ready.
func fleet(cluster1Ready bool) *model.MergedService {
	return merged(
		ep("cluster-1", "10.1.0.2", usEast1a, cluster1Ready),
		ep("cluster-1", "10.1.0.1", usEast1a, cluster1Ready),
		ep("cluster-1", "10.1.1.1", usEast1b, cluster1Ready),
		ep("cluster-2", "10.2.0.1", usEast1a, true),
		ep("cluster-2", "10.2.2.1", usEast1c, true),
		ep("cluster-3", "10.3.0.1", euWest1a, true),
		ep("cluster-3", "10.3.0.2", euWest1a, true),
	)
}

var (
	groupEast   = ProxyGroup{Cluster: "cluster-1", Region: "us-east"}
	groupNoZone = ProxyGroup{Cluster: "cluster-1"}
)
