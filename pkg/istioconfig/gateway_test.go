package istioconfig_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func gateway(ns, name string, age time.Duration, selector map[string]string) *istioconfig.Gateway {
	return &istioconfig.Gateway{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "Gateway", Namespace: ns, Name: name}, Created: time.Unix(0, 0).Add(-age)},
		Spec: &networking.Gateway{Selector: selector, Servers: []*networking.Server{{
			Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}}},
	}
}

// TestGatewayBinding: Gateways select proxies of any namespace by their
// labels, oldest first; a VirtualService binds to the Gateways its
// spec.gateways name ("ns/name", or "name" in its own namespace), never
// to the mesh unless it names "mesh".
func TestGatewayBinding(t *testing.T) {
	young := gateway("ingress", "young", 0, map[string]string{"istio": "ingressgateway"})
	old := gateway("other", "old", time.Hour, map[string]string{"istio": "ingressgateway"})
	all := gateway("other", "all", time.Minute, nil)
	bound := vs("ingress", "bound", 0, []string{"young", "other/old", "mesh"}, "a.example.com")
	gwOnly := vs("demo", "gw-only", 0, []string{"ingress/young"}, "echo")
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{young, old, all, bound, gwOnly})

	keys := func(gws []*istioconfig.Gateway) []string {
		var out []string
		for _, g := range gws {
			out = append(out, g.Key.String())
		}
		return out
	}
	if got, want := keys(s.GatewaysFor("ingress", model.NewLabels(map[string]string{"istio": "ingressgateway", "app": "x"}))),
		[]string{"Gateway/other/old", "Gateway/other/all", "Gateway/ingress/young"}; !slices.Equal(got, want) {
		t.Errorf("GatewaysFor ingressgateway %v, want %v", got, want)
	}
	if got := keys(s.GatewaysFor("ingress", model.NewLabels(map[string]string{"app": "x"}))); !slices.Equal(got, []string{"Gateway/other/all"}) {
		t.Errorf("GatewaysFor app=x %v: only the empty selector", got)
	}
	routes := func(k istioconfig.Key) []string {
		var out []string
		for _, v := range s.GatewayRoutes(k) {
			out = append(out, v.Key.String())
		}
		return out
	}
	// As old as each other: by key.
	if got := routes(young.Key); !slices.Equal(got, []string{"VirtualService/demo/gw-only", "VirtualService/ingress/bound"}) {
		t.Errorf("routes of young %v", got)
	}
	if got := routes(old.Key); !slices.Equal(got, []string{"VirtualService/ingress/bound"}) {
		t.Errorf("routes of other/old %v", got)
	}
	if c := s.Host("echo.demo.svc.cluster.local"); c.VirtualService != nil {
		t.Errorf("a gateway-only VirtualService applies to the mesh")
	}
	if c := s.Host("a.example.com"); c.VirtualService != bound {
		t.Errorf("a VirtualService naming mesh does not apply to it")
	}
}

func TestHostIntersection(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"*", "echo.example.com", "echo.example.com"},
		{"*.example.com", "echo.example.com", "echo.example.com"},
		{"echo.example.com", "*.example.com", "echo.example.com"},
		{"*.example.com", "*.a.example.com", "*.a.example.com"},
		{"Echo.Example.com", "echo.example.com", "echo.example.com"},
		{"echo.example.com", "other.example.com", ""},
		{"*.example.com", "example.com", ""},
	} {
		got, ok := istioconfig.HostIntersection(tc.a, tc.b)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("HostIntersection(%q, %q) = %q, %v; want %q", tc.a, tc.b, got, ok, tc.want)
		}
	}
}

// TestGatewayWarnings: what is wrong between Gateways and VirtualServices
// is reported on the object at fault: a VirtualService naming a Gateway
// that does not exist; the younger of two Gateways of the same proxies
// serving one port with different protocols. Gateways of different
// proxies may share a port.
func TestGatewayWarnings(t *testing.T) {
	old := gateway("ingress", "old", time.Hour, map[string]string{"istio": "ingressgateway"})
	clash := gateway("ingress", "clash", 0, map[string]string{"istio": "ingressgateway"})
	clash.Spec.Servers[0].Port.Protocol = "TCP"
	elsewhere := gateway("ingress", "elsewhere", 0, map[string]string{"istio": "other"})
	elsewhere.Spec.Servers[0].Port.Protocol = "TCP"
	missing := vs("demo", "missing", 0, []string{"ingress/old", "nowhere", "mesh"}, "a.example.com")
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{old, clash, elsewhere, missing})
	w := s.Warnings()
	if got := w[missing.Key]; len(got) != 1 || !strings.HasPrefix(got[0], "spec.gateways[1]: Gateway demo/nowhere does not exist") {
		t.Errorf("warnings of the VirtualService %q", got)
	}
	if got := w[clash.Key]; len(got) != 1 || !strings.Contains(got[0], "port 80 is served by Gateway ingress/old (servers[0], plaintext HTTP)") {
		t.Errorf("warnings of the clashing Gateway %q", got)
	}
	if len(w[old.Key]) != 0 || len(w[elsewhere.Key]) != 0 {
		t.Errorf("warnings %v of Gateways without a fault", w)
	}
}
