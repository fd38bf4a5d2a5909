package istioconfig_test

import (
	"slices"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func vs(ns, name string, age time.Duration, gateways []string, hosts ...string) *istioconfig.VirtualService {
	return &istioconfig.VirtualService{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: ns, Name: name}, Generation: 1, Created: t0.Add(-age)},
		Spec: &networking.VirtualService{Hosts: hosts, Gateways: gateways},
	}
}

func dr(ns, name string, host string) *istioconfig.DestinationRule {
	return &istioconfig.DestinationRule{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "DestinationRule", Namespace: ns, Name: name}, Generation: 1, Created: t0},
		Spec: &networking.DestinationRule{Host: host},
	}
}

func TestResolveHost(t *testing.T) {
	for _, tc := range []struct{ host, ns, want string }{
		{"reviews", "demo", "reviews.demo.svc.cluster.local"},
		{"reviews.other", "demo", "reviews.other.svc.cluster.local"},
		{"reviews.other.svc.cluster.local", "demo", "reviews.other.svc.cluster.local"},
		{"Reviews.Other.svc.cluster.local.", "demo", "reviews.other.svc.cluster.local"},
		{"api.example.com", "demo", "api.example.com"},
		{"*.demo.svc.cluster.local", "x", "*.demo.svc.cluster.local"},
		{"*", "x", "*"},
	} {
		if got := istioconfig.ResolveHost(tc.host, tc.ns, ""); string(got) != tc.want {
			t.Errorf("ResolveHost(%q, %q) = %q, want %q", tc.host, tc.ns, got, tc.want)
		}
	}
	if got := istioconfig.ResolveHost("a", "b", "corp"); got != "a.b.svc.corp" {
		t.Errorf("domain suffix: %q", got)
	}
}

func TestSnapshotHosts(t *testing.T) {
	echo := model.Hostname("echo.demo.svc.cluster.local")
	other := model.Hostname("other.demo.svc.cluster.local")
	far := model.Hostname("far.away.svc.cluster.local")
	old := vs("demo", "old", time.Hour, nil, "echo")
	young := vs("demo", "young", time.Minute, nil, "echo.demo.svc.cluster.local")
	wild := vs("demo", "wild", 0, []string{"mesh", "gw"}, "*.demo.svc.cluster.local")
	gwOnly := vs("away", "gw", 2*time.Hour, []string{"istio-system/ingress"}, "far.away")
	rule := dr("demo", "echo", "echo")
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{young, rule, old, wild, gwOnly})

	if c := s.Host(echo); c.VirtualService != old || c.DestinationRule != rule {
		t.Errorf("echo: %+v, want the oldest VS and the DR", c)
	}
	if c := s.Host(other); c.VirtualService != wild || c.DestinationRule != nil {
		t.Errorf("other: %+v, want the wildcard", c)
	}
	if c := s.Host(far); !c.Empty() {
		t.Errorf("a gateway-only VS applied to %s: %+v", far, c)
	}
	want := []istioconfig.Shadowed{{Host: echo, Lost: young.Key, By: old.Key}}
	if got := s.Shadowed(); !slices.Equal(got, want) {
		t.Errorf("shadowed %+v, want %+v", got, want)
	}
	if n := len(s.Objects()); n != 5 {
		t.Errorf("%d objects, want 5", n)
	}
	var empty *istioconfig.Snapshot
	if !empty.Host(echo).Empty() || empty.Objects() != nil || empty.DomainSuffix() != "cluster.local" {
		t.Errorf("a nil snapshot is not empty")
	}
}

func TestChangedHosts(t *testing.T) {
	a := model.Hostname("a.demo.svc.cluster.local")
	b := model.Hostname("b.demo.svc.cluster.local")
	c := model.Hostname("c.demo.svc.cluster.local")
	hosts := []model.Hostname{a, b, c}
	va, vb, rb := vs("demo", "a", 0, nil, "a"), vs("demo", "b", 0, nil, "b"), dr("demo", "b", "b")
	s1 := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{va, vb})
	// The same objects (pointers) in a new snapshot change nothing.
	if got := istioconfig.ChangedHosts(s1, istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{vb, va}), hosts); got != nil {
		t.Errorf("unchanged objects changed %v", got)
	}
	// A new version of a, and a DR for b: a and b change, c does not.
	va2 := vs("demo", "a", 0, nil, "a")
	s2 := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{va2, vb, rb})
	if got := istioconfig.ChangedHosts(s1, s2, hosts); !slices.Equal(got, []model.Hostname{a, b}) {
		t.Errorf("changed %v, want [a b]", got)
	}
	if got := istioconfig.ChangedHosts(s2, nil, hosts); !slices.Equal(got, []model.Hostname{a, b}) {
		t.Errorf("to nil: changed %v, want [a b]", got)
	}
}

// TestShadowedByTheWinner: of three objects claiming one host, whatever
// their order, both losers are shadowed by the oldest, the one that holds
// the host.
func TestShadowedByTheWinner(t *testing.T) {
	echo := model.Hostname("echo.demo.svc.cluster.local")
	a := vs("demo", "a", time.Minute, nil, "echo")
	b := vs("demo", "b", time.Hour, nil, "echo")
	c := vs("demo", "c", 2*time.Hour, nil, "echo")
	want := []istioconfig.Shadowed{{Host: echo, Lost: a.Key, By: c.Key}, {Host: echo, Lost: b.Key, By: c.Key}}
	for _, order := range [][]istioconfig.Object{{a, b, c}, {c, b, a}, {b, c, a}} {
		s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, order)
		if got := s.Host(echo).VirtualService; got != c {
			t.Errorf("host held by %v, want the oldest (c)", got.Key)
		}
		if got := s.Shadowed(); !slices.Equal(got, want) {
			t.Errorf("shadowed %+v, want %+v", got, want)
		}
	}
}

// TestTCPOnlyVirtualServiceDoesNotShadow: a VirtualService of only TCP
// rules, however old, does not hold a host that one with HTTP rules
// claims; it loses it (and is shown shadowed), whatever the order.
func TestTCPOnlyVirtualServiceDoesNotShadow(t *testing.T) {
	echo := model.Hostname("echo.demo.svc.cluster.local")
	tcpOnly := vs("demo", "tcp", 2*time.Hour, nil, "echo")
	tcpOnly.Spec.Tcp = []*networking.TCPRoute{{Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "echo"}}}}}
	http := vs("demo", "http", time.Minute, nil, "echo")
	http.Spec.Http = []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}}}}
	for _, order := range [][]istioconfig.Object{{tcpOnly, http}, {http, tcpOnly}} {
		s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, order)
		if got := s.Host(echo).VirtualService; got != http {
			t.Errorf("host held by %v, want the one with HTTP rules", got.Key)
		}
		want := []istioconfig.Shadowed{{Host: echo, Lost: tcpOnly.Key, By: http.Key}}
		if got := s.Shadowed(); !slices.Equal(got, want) {
			t.Errorf("shadowed %+v, want %+v", got, want)
		}
	}
	if got := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{tcpOnly}).Host(echo).VirtualService; got != tcpOnly {
		t.Errorf("alone, the TCP-only VirtualService does not hold its host (%v)", got)
	}
}
