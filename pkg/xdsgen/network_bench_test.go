package xdsgen

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshfed/meshfed/pkg/model"
)

// networkFleet is 1,000 services of 10 endpoints each, half in cluster-1
// and half in cluster-2, every Pod injected. With networks set, cluster-1
// is on network-1 and cluster-2 on network-2, which has two gateways;
// without, the fleet is one flat network.
func networkFleet(networks bool) ([]*model.MergedService, *model.NetworkGateways) {
	labels := model.NewLabels(map[string]string{TLSModeLabel: TLSModeIstio, "app": "svc"})
	services := make([]*model.MergedService, 1_000)
	for s := range services {
		eps := make([]model.Endpoint, 10)
		for i := range eps {
			c, n, region := model.ClusterID("cluster-1"), model.Network("network-1"), "us-east"
			if i%2 == 1 {
				c, n, region = "cluster-2", "network-2", "eu-west"
			}
			if !networks {
				n = ""
			}
			eps[i] = model.Endpoint{Cluster: c, Network: n, Ready: true, Labels: labels,
				Address:  netip.AddrFrom4([4]byte{10, byte(i), byte(s >> 8), byte(s)}),
				Locality: model.Locality{Region: region, Zone: fmt.Sprintf("%s-%d", region, i%3)},
				Ports:    map[string]uint32{"http": 8080}}
		}
		model.SortEndpoints(eps)
		h := model.Hostname(fmt.Sprintf("svc-%d.demo.svc.cluster.local", s))
		services[s] = &model.MergedService{
			Service:   &model.Service{Hostname: h, Name: fmt.Sprintf("svc-%d", s), Namespace: "demo", Ports: []model.ServicePort{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP}}},
			Endpoints: eps, Clusters: []model.ClusterID{"cluster-1", "cluster-2"},
		}
	}
	if !networks {
		return services, nil
	}
	gw := func(last byte) model.GatewayAddress {
		return model.GatewayAddress{Cluster: "cluster-2", Service: "istio-eastwestgateway.istio-system.svc.cluster.local",
			Address: netip.AddrFrom4([4]byte{203, 0, 113, last}), Port: model.DefaultGatewayPort}
	}
	return services, &model.NetworkGateways{ByNetwork: map[model.Network][]model.GatewayAddress{"network-2": {gw(1), gw(2)}},
		Networks: []model.Network{"network-1", "network-2"}}
}

// BenchmarkNetworkAssignments is the hub's cost of every load assignment
// of a proxy group (what a new group, or a gateway change, builds) for
// 1,000 services, in a flat fleet and with cluster-2 on a second network
// whose endpoints the group reaches through two gateways; "east-west" is
// a gateway's group on network-2, which also gets its SNI clusters' own
// assignments.
func BenchmarkNetworkAssignments(b *testing.B) {
	for _, tc := range []struct {
		name     string
		networks bool
		g        ProxyGroup
	}{
		{"flat", false, ProxyGroup{Cluster: "cluster-1", Region: "us-east"}},
		{"two-networks", true, ProxyGroup{Cluster: "cluster-1", Region: "us-east", Network: "network-1"}},
		{"east-west", true, ProxyGroup{Cluster: "cluster-2", Region: "eu-west", Network: "network-2", EastWest: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			services, nets := networkFleet(tc.networks)
			b.ReportAllocs()
			endpoints := 0
			for b.Loop() {
				endpoints = 0
				for _, ms := range services {
					for _, cla := range NetworkLoadAssignments(ms, tc.g, nil, nets) {
						for _, l := range cla.GetEndpoints() {
							endpoints += len(l.GetLbEndpoints())
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(services)), "µs/service")
			b.ReportMetric(float64(endpoints)/float64(len(services)), "sent/service")
		})
	}
}
