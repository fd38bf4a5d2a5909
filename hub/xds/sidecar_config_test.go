package xds

import (
	"slices"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

func configOf(objs ...istioconfig.Object) *istioconfig.Snapshot {
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
}

func meta(kind, name string) istioconfig.Meta {
	return istioconfig.Meta{Key: istioconfig.Key{Kind: kind, Namespace: "demo", Name: name}, Generation: 1, Created: time.Unix(0, 0)}
}

// TestSidecarConfigChanges: a VirtualService change rewrites the Envoy
// sidecars' shared routes and leaves their own listeners and clusters
// alone (not even regenerated); a DestinationRule change regenerates
// their clusters (here adding a subset's).
func TestSidecarConfigChanges(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil)
	sc := c.sidecars[node.GetId()]
	writesTo := func(ws []write, typeURL string) []string {
		var names []string
		for _, w := range ws {
			if w.typeURL == typeURL && (typeURL == resourcev3.RouteType && w.cache == c.envoyRoutes.lc ||
				typeURL == resourcev3.ClusterType && w.cache == sc.caches[typeURL].lc) {
				for n := range w.Upsert {
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		return names
	}

	vs := &istioconfig.VirtualService{Meta: meta("VirtualService", "echo"), Spec: &networking.VirtualService{
		Hosts: []string{string(echo)},
		Http: []*networking.HTTPRoute{{
			Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}},
			Retries: &networking.HTTPRetry{Attempts: 0},
		}},
	}}
	before := sc.replans
	ws := c.plan(nil, st.Service, configOf(vs))
	if got := writesTo(ws, resourcev3.RouteType); len(got) == 0 {
		t.Errorf("a VirtualService did not rewrite the sidecars' routes")
	}
	if sc.replans != before {
		t.Errorf("a VirtualService regenerated the sidecar's listeners and clusters")
	}

	dr := &istioconfig.DestinationRule{Meta: meta("DestinationRule", "echo"), Spec: &networking.DestinationRule{
		Host:    string(echo),
		Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}},
	}}
	ws = c.plan(nil, st.Service, configOf(vs, dr))
	if got, want := writesTo(ws, resourcev3.ClusterType), xdsgen.SubsetClusterName(echo, 8080, "v1"); !slices.Contains(got, want) {
		t.Errorf("a DestinationRule wrote sidecar clusters %v, want %s among them", got, want)
	}
	if sc.replans != before+1 {
		t.Errorf("a DestinationRule regenerated the sidecar %d times, want once", sc.replans-before)
	}
}

// TestSidecarScopeChanges: a Sidecar of the pod's namespace regenerates
// that pod's sidecar, which then holds only the services its egress
// hosts name; a push with the same configuration regenerates nothing.
func TestSidecarScopeChanges(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil)
	sc := c.sidecars[node.GetId()]
	outbound := func() []string {
		var out []string
		for n := range sc.caches[resourcev3.ClusterType].last {
			if _, _, err := xdsgen.ParseClusterName(n); err == nil {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := outbound(); !slices.Contains(got, xdsgen.ClusterName(echo, 8080)) {
		t.Fatalf("unscoped sidecar clusters %v lack echo's", got)
	}
	// The pod's node is of namespace demo; this Sidecar names another
	// namespace only.
	scope := &istioconfig.Sidecar{Meta: meta("Sidecar", "default"), Spec: &networking.Sidecar{
		Egress: []*networking.IstioEgressListener{{Hosts: []string{"elsewhere/*"}}},
	}}
	cfg := configOf(scope)
	before := sc.replans
	c.plan(nil, st.Service, cfg)
	if sc.replans != before+1 {
		t.Fatalf("a Sidecar of the pod's namespace regenerated the sidecar %d times, want once", sc.replans-before)
	}
	if got := outbound(); len(got) != 0 {
		t.Errorf("scoped to namespace elsewhere, the sidecar holds %v", got)
	}
	c.plan([]model.Hostname{echo}, st.Service, cfg)
	if sc.replans != before+1 {
		t.Errorf("a push under the same Sidecar regenerated the sidecar")
	}
}
