package xdsgen

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// TestSidecarIngress: a Sidecar's ingress listeners replace the ports the
// pod's Services give; each forwards where its defaultEndpoint says, and
// binds its own address without interception.
func TestSidecarIngress(t *testing.T) {
	if _, ok := SidecarIngress(nil, sidecarPodIP); ok {
		t.Error("no scope has ingress listeners")
	}
	egressOnly := &istioconfig.Sidecar{Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}}}
	if _, ok := SidecarIngress(egressOnly, sidecarPodIP); ok {
		t.Error("a Sidecar without ingress listeners replaces the inbound ports")
	}
	ingress := func(n uint32, proto, bind, ep string) *networking.IstioIngressListener {
		return &networking.IstioIngressListener{Port: &networking.SidecarPort{Number: n, Protocol: proto, Name: "p"}, Bind: bind, DefaultEndpoint: ep}
	}
	scope := &istioconfig.Sidecar{Spec: &networking.Sidecar{Ingress: []*networking.IstioIngressListener{
		ingress(9443, "TCP", "", "unix:///var/run/app.sock"),
		ingress(9080, "HTTP", "", "127.0.0.1:8080"),
		ingress(9081, "GRPC", "10.1.0.9", "0.0.0.0:7070"),
		ingress(9082, "HTTP2", "", "[::]:7071"), // the pod has no IPv6 address
		ingress(9083, "HTTP", "", ""),
	}}}
	got, ok := SidecarIngress(scope, sidecarPodIP)
	if !ok {
		t.Fatal("ingress listeners not seen")
	}
	want := []InboundPort{
		{Port: 9080, Protocol: model.ProtocolHTTP, Forward: netip.MustParseAddrPort("127.0.0.1:8080")},
		{Port: 9081, Protocol: model.ProtocolGRPC, Forward: netip.AddrPortFrom(sidecarPodIP, 7070), Bind: netip.MustParseAddr("10.1.0.9")},
		{Port: 9082, Protocol: model.ProtocolHTTP2, Forward: netip.MustParseAddrPort("[::1]:7071")},
		{Port: 9083, Protocol: model.ProtocolHTTP},
		{Port: 9443, Protocol: model.ProtocolTCP, Socket: "/var/run/app.sock"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ingress ports\n got %+v\nwant %+v", got, want)
	}

	for _, m := range sidecarModes {
		sc := sidecarOf(m)
		sc.Inbound = got
		// Where each inbound cluster sends.
		to := map[string]string{}
		for _, c := range SidecarClusters(sidecarServices(), nil, sc, Options{}) {
			if _, _, err := ParseClusterName(c.GetName()); err == nil || c.GetLoadAssignment() == nil {
				continue
			}
			a := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
			if p := a.GetPipe(); p != nil {
				to[c.GetName()] = "unix:" + p.GetPath()
			} else {
				to[c.GetName()] = netip.AddrPortFrom(netip.MustParseAddr(a.GetSocketAddress().GetAddress()), uint16(a.GetSocketAddress().GetPortValue())).String()
			}
			checkValid(t, c.GetName(), c)
		}
		wantTo := map[string]string{
			InboundClusterName(9080): "127.0.0.1:8080",
			InboundClusterName(9081): "10.1.0.1:7070",
			InboundClusterName(9082): "[::1]:7071",
			InboundClusterName(9083): "127.0.0.1:9083",
			InboundClusterName(9443): "unix:/var/run/app.sock",
		}
		if !maps.Equal(to, wantTo) {
			t.Errorf("%s: inbound clusters send to %v, want %v", m, to, wantTo)
		}
		ls := SidecarListeners(sidecarServices(), sc, Options{})
		for _, l := range ls {
			checkValid(t, l.GetName(), l)
		}
		if m != InterceptNone {
			continue
		}
		// Without interception each port binds: the pod IP, or its bind.
		for _, name := range []string{"10.1.0.1_9080", "10.1.0.9_9081", "10.1.0.1_9083", "10.1.0.1_9443"} {
			listenerNamed(t, ls, name)
		}
	}
}
