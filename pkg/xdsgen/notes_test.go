package xdsgen

import (
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
)

// TestConfigNotes: an object's notes cover both proxy kinds and the rules
// of every port, without duplicates.
func TestConfigNotes(t *testing.T) {
	vs := &istioconfig.VirtualService{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "echo"}},
		Spec: &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{
			{ // port-bound: only its port's routes show it
				Match: []*networking.HTTPMatchRequest{{Port: 9090, QueryParams: map[string]*networking.StringMatch{
					"q": {MatchType: &networking.StringMatch_Exact{Exact: "1"}}}}},
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
			},
			{
				Mirror: &networking.Destination{Host: "shadow"},
				Route:  []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
			},
		}},
	}
	var got []string
	for _, n := range ConfigNotes(vs, "") {
		got = append(got, n.Kind.String()+" "+n.Field)
	}
	want := []string{
		ProxyGRPC.String() + " spec.http[0].match[0].queryParams",
		ProxyGRPC.String() + " spec.http[1].mirror",
	}
	if !slices.Equal(got, want) {
		t.Errorf("VirtualService notes\n  got  %q\n  want %q", got, want)
	}

	dr := &istioconfig.DestinationRule{Spec: &networking.DestinationRule{Host: "echo", TrafficPolicy: &networking.TrafficPolicy{
		LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}},
	}}}
	notes := ConfigNotes(dr, "")
	if len(notes) != 1 || notes[0].Kind != ProxyGRPC || notes[0].Field != "spec.trafficPolicy.loadBalancer.simple" {
		t.Errorf("DestinationRule notes %v, want one for gRPC on loadBalancer.simple", notes)
	}

	sc := &istioconfig.Sidecar{Spec: &networking.Sidecar{
		Ingress: []*networking.IstioIngressListener{
			{Port: &networking.SidecarPort{Number: 9080, Protocol: "HTTP"}, DefaultEndpoint: "127.0.0.1:8080"},
			{Port: &networking.SidecarPort{Number: 9443, Protocol: "HTTPS"}, CaptureMode: networking.CaptureMode_NONE,
				Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE}},
		},
		Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}, Bind: "127.0.0.2"}},
	}}
	got = nil
	for _, n := range ConfigNotes(sc, "") {
		got = append(got, n.Kind.String()+" "+n.Field)
	}
	want = []string{
		ProxyEnvoy.String() + " spec.ingress[1].captureMode",
		ProxyEnvoy.String() + " spec.ingress[1].tls",
		ProxyEnvoy.String() + " spec.egress[0].bind",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Sidecar notes\n  got  %q\n  want %q", got, want)
	}
}

// TestStreamRuleNotes: a VirtualService's tcp[] and tls[] rules are noted
// for proxyless gRPC (no TCP proxy), and for Envoy sidecars only their
// matches on the client or destination subnets, which sidecars do not
// evaluate.
func TestStreamRuleNotes(t *testing.T) {
	vs := &istioconfig.VirtualService{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "db"}},
		Spec: &networking.VirtualService{Hosts: []string{"db"},
			Tcp: []*networking.TCPRoute{{
				Match: []*networking.L4MatchAttributes{{Port: 5432}, {SourceLabels: map[string]string{"app": "x"}}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "db"}}}}},
			Tls: []*networking.TLSRoute{{Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"db"}, DestinationSubnets: []string{"10.0.0.0/8"}}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "db"}}}}},
		},
	}
	var got []string
	for _, n := range ConfigNotes(vs, "") {
		got = append(got, n.Kind.String()+" "+n.Field)
	}
	want := []string{
		ProxyGRPC.String() + " spec.tcp",
		ProxyEnvoy.String() + " spec.tcp[0].match[1].sourceLabels",
		ProxyGRPC.String() + " spec.tls",
		ProxyEnvoy.String() + " spec.tls[0].match[0].destinationSubnets",
	}
	if !slices.Equal(got, want) {
		t.Errorf("notes\n  got  %q\n  want %q", got, want)
	}
}
