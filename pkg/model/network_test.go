package model

import (
	"net/netip"
	"strings"
	"testing"
)

func networkShard(name string, net Network, eps ...Network) *ServiceShard {
	s := &ServiceShard{Service: &Service{Hostname: Hostname(name + ".ns.svc.cluster.local"), Name: name, Namespace: "ns"}, Network: net}
	for i, n := range eps {
		s.Endpoints = append(s.Endpoints, Endpoint{Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Network: n, Ready: true})
	}
	return s
}

func gatewayShard(name string, net Network, addrs ...string) *ServiceShard {
	s := networkShard(name, net)
	s.Gateway = &NetworkGateway{Network: net, Port: DefaultGatewayPort}
	for _, a := range addrs {
		s.Gateway.Addresses = append(s.Gateway.Addresses, netip.MustParseAddr(a))
	}
	if len(addrs) == 0 {
		s.Gateway.Problem = "no address"
	}
	return s
}

// TestNetworkGateways: the view follows gateway shards and the networks
// endpoints are on; an address two networks claim is used by neither; a
// network without a usable gateway is a problem; the memo is dropped only
// when something it reads changes.
func TestNetworkGateways(t *testing.T) {
	r := NewRegistry()
	r.ReplaceCluster("c1", map[Hostname]*ServiceShard{
		"echo.ns.svc.cluster.local": networkShard("echo", "n1", "n1", "n1", "n3"),
	})
	r.ReplaceCluster("c2", map[Hostname]*ServiceShard{
		"echo.ns.svc.cluster.local": networkShard("echo", "n2", "n2"),
		"ew.ns.svc.cluster.local":   gatewayShard("ew", "n2", "198.19.0.2", "198.19.0.3"),
	})
	v := r.NetworkGateways()
	if got := v.Of("n2"); len(got) != 2 || got[0].Address.String() != "198.19.0.2" || got[0].Port != DefaultGatewayPort || got[0].Cluster != "c2" {
		t.Fatalf("n2 gateways = %+v", got)
	}
	if got := strings.Join(netStrings(v.Networks), ","); got != "n1,n2,n3" {
		t.Errorf("networks = %s", got)
	}
	if len(v.Problems) != 2 || v.Problems[0].Network != "n1" || v.Problems[0].Reason != ProblemNoGateway || v.Problems[1].Network != "n3" {
		t.Errorf("problems = %+v", v.Problems)
	}
	if r.NetworkGateways() != v {
		t.Error("the view was rebuilt without a change")
	}
	if r.ClusterNetwork("c2") != "n2" || r.ClusterNetwork("c9") != "" {
		t.Errorf("cluster networks: %q %q", r.ClusterNetwork("c2"), r.ClusterNetwork("c9"))
	}

	// An endpoint change that keeps the networks keeps the view.
	if _, err := r.UpdateShard("c1", "echo.ns.svc.cluster.local", networkShard("echo", "n1", "n1", "n3")); err != nil {
		t.Fatal(err)
	}
	if r.NetworkGateways() != v {
		t.Error("the view was rebuilt for an endpoint change that moved no network")
	}

	// n1 gets a gateway on an address n2 claims too: neither uses it.
	if _, err := r.UpdateShard("c1", "ew.ns.svc.cluster.local", gatewayShard("ew", "n1", "198.19.0.3")); err != nil {
		t.Fatal(err)
	}
	v2 := r.NetworkGateways()
	if v2 == v || v2.SameRoutes(v) {
		t.Fatal("a new gateway did not change the view")
	}
	if got := v2.Of("n2"); len(got) != 1 || got[0].Address.String() != "198.19.0.2" {
		t.Errorf("n2 gateways = %+v", got)
	}
	if v2.Of("n1") != nil {
		t.Errorf("n1 uses a conflicting address: %+v", v2.Of("n1"))
	}
	conflicts := 0
	for _, p := range v2.Problems {
		if p.Reason == ProblemAddressConflict {
			conflicts++
			if !strings.Contains(p.Message, "198.19.0.3") || !strings.Contains(p.Message, "n1, n2") {
				t.Errorf("conflict message %q", p.Message)
			}
		}
	}
	if conflicts != 2 {
		t.Errorf("%d conflicts, want 2: %+v", conflicts, v2.Problems)
	}

	// A gateway without an address is a problem of its own; removing the
	// cluster takes its gateways away.
	if _, err := r.UpdateShard("c1", "ew.ns.svc.cluster.local", gatewayShard("ew", "n1")); err != nil {
		t.Fatal(err)
	}
	if p := r.NetworkGateways().Problems; len(p) != 2 || p[0].Reason != ProblemNoAddress || p[0].Cluster != "c1" {
		t.Errorf("problems = %+v", p)
	}
	r.RemoveCluster("c2")
	if v := r.NetworkGateways(); v.Of("n2") != nil || len(v.ByNetwork) != 0 {
		t.Errorf("gateways after removing c2: %+v", v.ByNetwork)
	}
}

func netStrings(ns []Network) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = string(n)
	}
	return out
}
