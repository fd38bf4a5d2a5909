package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/pkg/model"
)

// multiNetworkEcho is echo on three networks: c1 (n1) two injected
// endpoints; c2 (n2) three injected, one uninjected; c3 (n3) one injected,
// on a network without a gateway.
func multiNetworkEcho() *model.MergedService {
	injectedLabels := model.NewLabels(map[string]string{TLSModeLabel: TLSModeIstio, "version": "v1"})
	plain := model.NewLabels(map[string]string{"version": "v1"})
	ep := func(c model.ClusterID, n model.Network, addr string, region string, labels model.Labels) model.Endpoint {
		return model.Endpoint{Cluster: c, Network: n, Address: netip.MustParseAddr(addr), Ready: true, Labels: labels,
			Locality: model.Locality{Region: region}, Ports: map[string]uint32{"http": 8080}}
	}
	ms := &model.MergedService{
		Service: &model.Service{Hostname: "echo.demo.svc.cluster.local", Name: "echo", Namespace: "demo",
			Ports: []model.ServicePort{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP}}},
		Endpoints: []model.Endpoint{
			ep("c1", "n1", "10.1.0.1", "east", injectedLabels),
			ep("c1", "n1", "10.1.0.2", "east", injectedLabels),
			ep("c2", "n2", "10.2.0.1", "east", injectedLabels),
			ep("c2", "n2", "10.2.0.2", "west", injectedLabels),
			ep("c2", "n2", "10.2.0.3", "west", injectedLabels),
			ep("c2", "n2", "10.2.0.4", "west", plain),
			ep("c3", "n3", "10.3.0.1", "west", injectedLabels),
		},
		Clusters: []model.ClusterID{"c1", "c2", "c3"},
	}
	model.SortEndpoints(ms.Endpoints)
	return ms
}

func n2Gateways(addrs ...string) *model.NetworkGateways {
	nets := &model.NetworkGateways{ByNetwork: map[model.Network][]model.GatewayAddress{}}
	for _, a := range addrs {
		nets.ByNetwork["n2"] = append(nets.ByNetwork["n2"], model.GatewayAddress{Cluster: "c2", Service: "ew.istio-system.svc.cluster.local",
			Address: netip.MustParseAddr(a), Port: model.DefaultGatewayPort})
	}
	return nets
}

// sentEndpoints renders an assignment as "p<priority> <addr:port>x<weight>"
// per endpoint, and the locality weights.
func sentEndpoints(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			tls := ""
			if lb.GetMetadata().GetFilterMetadata()[TransportSocketMatchKey] != nil {
				tls = " mtls"
			}
			out = append(out, fmt.Sprintf("p%d %s/%d %s:%dx%d%s", l.GetPriority(), l.GetLocality().GetRegion(), l.GetLoadBalancingWeight().GetValue(),
				sa.GetAddress(), sa.GetPortValue(), lb.GetLoadBalancingWeight().GetValue(), tls))
		}
	}
	return out
}

func TestNetworkLoadAssignments(t *testing.T) {
	ms := multiNetworkEcho()
	for _, tc := range []struct {
		name string
		g    ProxyGroup
		nets *model.NetworkGateways
		want []string
	}{{
		// A proxy of no known network reaches every endpoint, as before
		// networks.
		name: "unknown network",
		g:    ProxyGroup{Cluster: "c1", Region: "east"},
		nets: n2Gateways("198.19.2.1"),
		want: []string{"p0 east/2 10.1.0.1:8080x1 mtls", "p0 east/2 10.1.0.2:8080x1 mtls",
			"p1 east/1 10.2.0.1:8080x1 mtls",
			"p2 west/4 10.2.0.2:8080x1 mtls", "p2 west/4 10.2.0.3:8080x1 mtls", "p2 west/4 10.2.0.4:8080x1", "p2 west/4 10.3.0.1:8080x1 mtls"},
	}, {
		// n2's injected endpoints are its gateway's, in the best class of
		// those it stands for (an address is sent once); the uninjected
		// one and n3 (no gateway) are not sent.
		name: "n1 with one n2 gateway",
		g:    ProxyGroup{Cluster: "c1", Region: "east", Network: "n1"},
		nets: n2Gateways("198.19.2.1"),
		want: []string{"p0 east/2 10.1.0.1:8080x1 mtls", "p0 east/2 10.1.0.2:8080x1 mtls",
			"p1 east/1 198.19.2.1:15443x1 mtls"},
	}, {
		// Two gateways share the weight of the endpoints behind them: the
		// two n2 endpoints in the proxies' region west.
		name: "n1 with two n2 gateways",
		g:    ProxyGroup{Cluster: "c1", Region: "west", Network: "n1"},
		nets: n2Gateways("198.19.2.1", "198.19.2.2"),
		want: []string{"p0 east/2 10.1.0.1:8080x1 mtls", "p0 east/2 10.1.0.2:8080x1 mtls",
			"p1 west/2 198.19.2.1:15443x1 mtls", "p1 west/2 198.19.2.2:15443x1 mtls"},
	}, {
		name: "n1 without gateways",
		g:    ProxyGroup{Cluster: "c1", Region: "east", Network: "n1"},
		want: []string{"p0 east/2 10.1.0.1:8080x1 mtls", "p0 east/2 10.1.0.2:8080x1 mtls"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			clas := NetworkLoadAssignments(ms, tc.g, nil, tc.nets)
			if len(clas) != 1 {
				t.Fatalf("%d assignments", len(clas))
			}
			if got := sentEndpoints(clas[0]); !slices.Equal(got, tc.want) {
				t.Errorf("sent\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestNetworkKeepsPriorities: a group in the west ranks the gateway that
// stands for west endpoints above the east ones, as it would rank those
// endpoints themselves.
func TestNetworkKeepsPriorities(t *testing.T) {
	ms := multiNetworkEcho()
	g := ProxyGroup{Cluster: "c9", Region: "west", Network: "n1"}
	got := sentEndpoints(NetworkLoadAssignments(ms, g, nil, n2Gateways("198.19.2.1"))[0])
	want := []string{"p0 west/2 198.19.2.1:15443x2 mtls", "p1 east/2 10.1.0.1:8080x1 mtls", "p1 east/2 10.1.0.2:8080x1 mtls"}
	if !slices.Equal(got, want) {
		t.Errorf("sent\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestEastWestAssignments: an east-west router's group also gets each
// cluster's SNI-named assignment, of its own network's endpoints only,
// never a gateway.
func TestEastWestAssignments(t *testing.T) {
	ms := multiNetworkEcho()
	dr := subsetRule("echo", "v1")
	g := ProxyGroup{Cluster: "c2", Region: "west", Network: "n2", EastWest: true}
	clas := NetworkLoadAssignments(ms, g, dr, n2Gateways("198.19.2.1"))
	var names []string
	for _, c := range clas {
		names = append(names, c.GetClusterName())
	}
	wantNames := []string{"outbound|80||echo.demo.svc.cluster.local", "outbound_.80_._.echo.demo.svc.cluster.local",
		"outbound|80|v1|echo.demo.svc.cluster.local", "outbound_.80_.v1_.echo.demo.svc.cluster.local"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("assignments %v, want %v", names, wantNames)
	}
	got := sentEndpoints(clas[1])
	want := []string{"p0 east/1 10.2.0.1:8080x1 mtls", "p0 west/3 10.2.0.2:8080x1 mtls", "p0 west/3 10.2.0.3:8080x1 mtls", "p0 west/3 10.2.0.4:8080x1"}
	if !slices.Equal(got, want) {
		t.Errorf("SNI assignment\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if g := sentEndpoints(clas[0]); !slices.Contains(g, "p0 east/1 10.2.0.1:8080x1 mtls") || slices.ContainsFunc(g, func(s string) bool { return strings.Contains(s, "10.1.0.") }) {
		t.Errorf("the router's own assignment: %v", g)
	}
}

// TestExplainNetworks: explain names the gateway sent for another
// network, with its weight, and says why that network's endpoints, the
// uninjected one and the gateway-less network's are not sent themselves.
func TestExplainNetworks(t *testing.T) {
	ms := multiNetworkEcho()
	g := ProxyGroup{Cluster: "c1", Region: "west", Network: "n1"}
	x, err := ExplainEndpoints(ms, g, nil, n2Gateways("198.19.2.1"), 80, "")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range x.Endpoints {
		lines = append(lines, fmt.Sprintf("%s sent=%v gw=%v w=%d %s: %s", e.Address, e.Sent, e.Gateway, e.Weight, e.Network, e.Reason))
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{
		"198.19.2.1:15443 sent=true gw=true w=2 n2: gateway ew.istio-system.svc.cluster.local of network n2",
		"10.1.0.1:8080 sent=true gw=false w=1 n1: in the proxy's own cluster c1",
		"10.2.0.2:8080 sent=false gw=false w=0 n2: on network n2: reached through its gateway",
		"10.2.0.4:8080 sent=false gw=false w=0 n2: on network n2 and takes no Istio mutual TLS",
		"10.3.0.1:8080 sent=false gw=false w=0 n3: on network n3, which has no usable gateway",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("explanation lacks %q:\n%s", want, joined)
		}
	}
	if x.Network != "n1" {
		t.Errorf("network %q", x.Network)
	}
}
