package istioconfig_test

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// withMatches gives v one HTTP rule per match.
func withMatches(v *istioconfig.VirtualService, ms ...*networking.HTTPMatchRequest) *istioconfig.VirtualService {
	for _, m := range ms {
		v.Spec.Http = append(v.Spec.Http, &networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{m}})
	}
	return v
}

func TestRouteClass(t *testing.T) {
	canary := &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "client", "track": "canary"}}
	testsNS := &networking.HTTPMatchRequest{SourceNamespace: "tests"}
	appInTests := &networking.HTTPMatchRequest{SourceNamespace: "tests", SourceLabels: map[string]string{"app": "client"}}
	// Source conditions of a match that names gateways are ignored, and a
	// VirtualService bound to gateways only never reaches sidecars.
	gatewayMatch := &networking.HTTPMatchRequest{Gateways: []string{"mesh"}, SourceLabels: map[string]string{"app": "gw"}}
	plain := &networking.HTTPMatchRequest{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/a"}}}
	snap := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{
		withMatches(vs("demo", "a", 0, nil, "a"), canary, testsNS, gatewayMatch, plain),
		// The same condition, with its labels in another order, in another
		// object: one condition.
		withMatches(vs("demo", "b", 0, nil, "b"), &networking.HTTPMatchRequest{SourceLabels: map[string]string{"track": "canary", "app": "client"}}, appInTests),
		withMatches(vs("demo", "gw", 0, []string{"ingress/gw"}, "c"), &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "edge"}}),
	})
	if !snap.HasSourceRules() {
		t.Fatal("HasSourceRules false")
	}
	class := func(ns string, labels map[string]string) istioconfig.RouteClass {
		return snap.RouteClass(ns, model.NewLabels(labels))
	}
	for _, c := range []struct {
		name   string
		class  istioconfig.RouteClass
		admits []*networking.HTTPMatchRequest
		denies []*networking.HTTPMatchRequest
	}{
		{"default", class("demo", map[string]string{"app": "client"}), []*networking.HTTPMatchRequest{plain, nil}, []*networking.HTTPMatchRequest{canary, testsNS, appInTests}},
		{"canary", class("demo", map[string]string{"app": "client", "track": "canary", "x": "y"}), []*networking.HTTPMatchRequest{canary, plain}, []*networking.HTTPMatchRequest{testsNS, appInTests}},
		{"tests", class("tests", map[string]string{"app": "client"}), []*networking.HTTPMatchRequest{testsNS, appInTests}, []*networking.HTTPMatchRequest{canary}},
		{"tests, other app", class("tests", map[string]string{"app": "server"}), []*networking.HTTPMatchRequest{testsNS}, []*networking.HTTPMatchRequest{canary, appInTests}},
	} {
		for _, m := range c.admits {
			if !c.class.Admits(m) {
				t.Errorf("%s (%v) does not admit %v", c.name, c.class, m)
			}
		}
		for _, m := range c.denies {
			if c.class.Admits(m) {
				t.Errorf("%s (%v) admits %v", c.name, c.class, m)
			}
		}
	}
	if c := class("demo", map[string]string{"app": "gw"}); !c.IsDefault() || c.Name() != "" || c.String() != "default" {
		t.Errorf("a client that only a gateway-bound condition names is of class %v (%q), want the default", c, c.Name())
	}
	if c := class("demo", map[string]string{"app": "edge"}); !c.IsDefault() {
		t.Errorf("a gateway-only VirtualService gives class %v", c)
	}

	// Equal classes for clients satisfying the same conditions; distinct
	// names otherwise.
	a := class("demo", map[string]string{"app": "client", "track": "canary"})
	b := class("demo", map[string]string{"app": "client", "track": "canary", "pod": "p-2"})
	if a != b || a.Name() != b.Name() || a.IsDefault() {
		t.Errorf("same conditions, classes %v (%s) and %v (%s)", a, a.Name(), b, b.Name())
	}
	if n1, n2 := a.Name(), class("tests", nil).Name(); n1 == n2 || len(n1) != 16 || len(n2) != 16 {
		t.Errorf("class names %q and %q, want distinct 16-digit names", n1, n2)
	}
	if got, want := class("tests", map[string]string{"app": "client"}).String(), "tests; tests;app=client"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	var empty *istioconfig.Snapshot
	if empty.HasSourceRules() || !empty.RouteClass("demo", model.Labels{}).IsDefault() {
		t.Error("a nil snapshot has source rules")
	}
}
