package xds

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
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
	c.plan([]model.Hostname{echo}, st.Service, nil, nil)
	sc := c.sidecars[node.GetId()]
	scn := c.envoy.Node(node.GetId())
	writesTo := func(ws []write, typeURL string) []string {
		var names []string
		for _, w := range ws {
			if w.typeURL == typeURL && (typeURL == resourcev3.RouteType && w.cache == c.envoyRoutes ||
				typeURL == resourcev3.ClusterType && w.cache == sc.caches[typeURL]) {
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
	before := scn.Replans()
	ws := c.plan(nil, st.Service, configOf(vs), nil)
	if got := writesTo(ws, resourcev3.RouteType); len(got) == 0 {
		t.Errorf("a VirtualService did not rewrite the sidecars' routes")
	}
	if scn.Replans() != before {
		t.Errorf("a VirtualService regenerated the sidecar's listeners and clusters")
	}

	dr := &istioconfig.DestinationRule{Meta: meta("DestinationRule", "echo"), Spec: &networking.DestinationRule{
		Host:    string(echo),
		Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}},
	}}
	ws = c.plan(nil, st.Service, configOf(vs, dr), nil)
	if got, want := writesTo(ws, resourcev3.ClusterType), xdsgen.SubsetClusterName(echo, 8080, "v1"); !slices.Contains(got, want) {
		t.Errorf("a DestinationRule wrote sidecar clusters %v, want %s among them", got, want)
	}
	if scn.Replans() != before+1 {
		t.Errorf("a DestinationRule regenerated the sidecar %d times, want once", scn.Replans()-before)
	}
}

// TestSidecarScopeChanges: a Sidecar of the pod's namespace regenerates
// that pod's sidecar, which then holds only the services its egress
// hosts name; a push with the same configuration regenerates nothing.
func TestSidecarScopeChanges(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil, nil)
	scn := c.envoy.Node(node.GetId())
	outbound := func() []string {
		var out []string
		for n := range scn.Written(resourcev3.ClusterType) {
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
	before := scn.Replans()
	c.plan(nil, st.Service, cfg, nil)
	if scn.Replans() != before+1 {
		t.Fatalf("a Sidecar of the pod's namespace regenerated the sidecar %d times, want once", scn.Replans()-before)
	}
	if got := outbound(); len(got) != 0 {
		t.Errorf("scoped to namespace elsewhere, the sidecar holds %v", got)
	}
	c.plan([]model.Hostname{echo}, st.Service, cfg, nil)
	if scn.Replans() != before+1 {
		t.Errorf("a push under the same Sidecar regenerated the sidecar")
	}
}

// rdsNames returns the sorted route configuration names that the
// sidecar's listeners take.
func rdsNames(t *testing.T, n *xdsgen.SidecarNode) []string {
	t.Helper()
	var out []string
	for _, r := range n.Written(resourcev3.ListenerType) {
		for _, fc := range r.(*listenerv3.Listener).GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) == nil && hcm.GetRds() != nil && !slices.Contains(out, hcm.GetRds().GetRouteConfigName()) {
					out = append(out, hcm.GetRds().GetRouteConfigName())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestSidecarRouteClassChanges: a VirtualService match on clients gives
// the sidecars that satisfy it routes of their class, which their
// listeners name, by the registry's Pod or else the node's own namespace
// and labels; a change of the match moves them, and the routes of a
// class no sidecar is of any more are deleted.
func TestSidecarRouteClassChanges(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil, nil)
	a, an := c.sidecars[node.GetId()], c.envoy.Node(node.GetId())
	vsOn := func(m *networking.HTTPMatchRequest) *istioconfig.Snapshot {
		return configOf(&istioconfig.VirtualService{Meta: meta("VirtualService", "echo"), Spec: &networking.VirtualService{
			Hosts: []string{string(echo)},
			Http: []*networking.HTTPRoute{
				{Name: "by-client", Match: []*networking.HTTPMatchRequest{m},
					Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}}},
				{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}}},
			},
		}})
	}
	routes := func() []string { return slices.Sorted(maps.Keys(c.envoy.Routes())) }

	// Every pod of namespace demo: the registry's Pod at 10.0.0.5 is.
	byNS := vsOn(&networking.HTTPMatchRequest{SourceNamespace: "demo"})
	c.plan(nil, st.Service, byNS, nil)
	nsClass := byNS.RouteClass("demo", model.Labels{})
	nsRoutes := xdsgen.SidecarRouteSetName(8080, xdsgen.RouteSet{Class: nsClass})
	if an.Proxy.Routes != nsClass || nsClass.IsDefault() {
		t.Fatalf("sidecar of class %v, want %v", an.Proxy.Routes, nsClass)
	}
	if got := routes(); !slices.Equal(got, []string{"8080", nsRoutes}) {
		t.Errorf("shared routes %v, want 8080 and %s", got, nsRoutes)
	}
	if got := rdsNames(t, an); !slices.Equal(got, []string{nsRoutes}) {
		t.Errorf("listeners take routes %v, want %s", got, nsRoutes)
	}
	if got := testutil.ToFloat64(c.metrics.routeSets); got != 1 {
		t.Errorf("meshfed_xds_route_sets = %v, want 1", got)
	}

	// A node whose Pod the registry does not know is classed by its own
	// metadata.
	nodeB := envoyNode("10.0.0.77", "pod-b", "c1", "NONE")
	nodeB.Metadata.Fields[xdsnode.MetadataLabels] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"app": structpb.NewStringValue("client")}})
	atB := c.attach(attachment{}, nodeB, xdsnode.MetadataOf(nodeB.GetMetadata()))
	c.adoptBuilt() // as the push loop does
	bn := c.envoy.Node(nodeB.GetId())
	if bn.Proxy.Routes != nsClass {
		t.Errorf("node of namespace demo of class %v, want %v", bn.Proxy.Routes, nsClass)
	}

	// Now only pods labelled app=client: b moves to the new class, a to
	// the default, and the namespace's class and its routes are gone.
	byLabels := vsOn(&networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "client"}})
	ws := c.plan(nil, st.Service, byLabels, nil)
	// The namespace's routes are deleted only after the listeners that
	// named them have moved on.
	listenerAt, deleteAt := -1, -1
	for i, w := range ws {
		if w.cache == a.caches[resourcev3.ListenerType] {
			listenerAt = i
		}
		if w.cache == c.envoyRoutes && slices.Contains(w.Delete, nsRoutes) {
			deleteAt = i
		}
	}
	if listenerAt < 0 || deleteAt < listenerAt {
		t.Errorf("listener write at %d, deletion of %s at %d: want the deletion after", listenerAt, nsRoutes, deleteAt)
	}
	labelRoutes := xdsgen.SidecarRouteSetName(8080, xdsgen.RouteSet{Class: byLabels.RouteClass("demo", model.NewLabels(map[string]string{"app": "client"}))})
	if got := rdsNames(t, an); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("unlabelled sidecar's listeners take routes %v, want 8080", got)
	}
	if got := rdsNames(t, bn); !slices.Equal(got, []string{labelRoutes}) {
		t.Errorf("app=client sidecar's listeners take routes %v, want %s", got, labelRoutes)
	}
	if got := routes(); !slices.Equal(got, []string{"8080", labelRoutes}) {
		t.Errorf("shared routes %v, want 8080 and %s", got, labelRoutes)
	}
	if vh := c.envoy.Routes()[labelRoutes].(*routev3.RouteConfiguration).GetVirtualHosts()[0]; vh.GetRoutes()[0].GetName() != "by-client" {
		t.Errorf("class routes %v lack the match on clients", vh.GetRoutes())
	}
	if vh := c.envoy.Routes()["8080"].(*routev3.RouteConfiguration).GetVirtualHosts()[0]; len(vh.GetRoutes()) != 1 || vh.GetRoutes()[0].GetName() != "" {
		t.Errorf("default routes %v hold the match on clients", vh.GetRoutes())
	}

	c.detach(atB)
	if got := routes(); !slices.Equal(got, []string{"8080"}) || c.envoy.RouteSets() != 0 {
		t.Errorf("with the class's last sidecar gone, routes %v and route sets %v remain", got, c.envoy.RouteSets())
	}
}

// TestSidecarIngressListeners: a Sidecar with ingress listeners replaces
// the inbound ports the pod's Services give (here 9000) with its own, and
// removing it brings them back.
func TestSidecarIngressListeners(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil, nil)
	scn := c.envoy.Node(node.GetId())
	inbound := func() []string {
		var out []string
		for n := range scn.Written(resourcev3.ClusterType) {
			if strings.HasPrefix(n, "inbound|") {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := inbound(); !slices.Equal(got, []string{xdsgen.InboundClusterName(9000)}) {
		t.Fatalf("inbound clusters %v, want the Service's port 9000", got)
	}
	withIngress := configOf(&istioconfig.Sidecar{Meta: meta("Sidecar", "default"), Spec: &networking.Sidecar{
		Ingress: []*networking.IstioIngressListener{{
			Port:            &networking.SidecarPort{Number: 9100, Protocol: "HTTP", Name: "http"},
			DefaultEndpoint: "127.0.0.1:9000",
		}},
	}})
	c.plan(nil, st.Service, withIngress, nil)
	if got := inbound(); !slices.Equal(got, []string{xdsgen.InboundClusterName(9100)}) {
		t.Errorf("with an ingress listener, inbound clusters %v, want its port 9100 only", got)
	}
	c.plan(nil, st.Service, configOf(), nil)
	if got := inbound(); !slices.Equal(got, []string{xdsgen.InboundClusterName(9000)}) {
		t.Errorf("without the Sidecar, inbound clusters %v, want port 9000 again", got)
	}
}

// TestRoutesGoneSpareASetAdoptedSince: a push that empties a route set
// deletes the set's routes after its other writes. A sidecar of that set
// that connects once the push has planned, but before those writes, is
// adopted at once and brings the set back: its routes must survive the
// push's deletion, or the sidecar's listeners name routes the cache lacks
// (while the planner's record holds them, so no later push writes them).
func TestRoutesGoneSpareASetAdoptedSince(t *testing.T) {
	st, c, node, writeShard := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	labelled := func(app string) map[model.Hostname]*model.ServiceShard {
		sh := shard("c1", "r1", "10.0.0.5")
		sh[echo].Endpoints[0].Pod = "pod-10.0.0.5"
		sh[echo].Endpoints[0].Labels = model.NewLabels(map[string]string{"app": app})
		return sh
	}
	applyAll := func(ws []write) {
		t.Helper()
		for _, w := range ws {
			if err := c.apply(w); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := configOf(&istioconfig.VirtualService{Meta: meta("VirtualService", "echo"), Spec: &networking.VirtualService{
		Hosts: []string{string(echo)},
		Http: []*networking.HTTPRoute{
			{Name: "by-client", Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "client"}}},
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}}},
			{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}}},
		},
	}})
	class := cfg.RouteClass("demo", model.NewLabels(map[string]string{"app": "client"}))
	setRoutes := xdsgen.SidecarRouteSetName(8080, xdsgen.RouteSet{Class: class})

	writeShard(labelled("client"))
	applyAll(c.plan([]model.Hostname{echo}, st.Service, cfg, nil))
	if got := c.envoy.Node(node.GetId()).Proxy.Routes; got != class {
		t.Fatalf("the app=client pod's sidecar is of class %v, want %v", got, class)
	}
	if !c.envoyRoutes.has(setRoutes) {
		t.Fatalf("routes %s not written", setRoutes)
	}

	// The pod loses its label: the push moves its sidecar to the default
	// set, and the class's routes are to be deleted last.
	writeShard(labelled("other"))
	ws := c.plan([]model.Hostname{echo}, st.Service, cfg, nil)
	deletes := false
	for _, w := range ws {
		deletes = deletes || w.cache == c.envoyRoutes && slices.Contains(w.Delete, setRoutes)
	}
	if !deletes {
		t.Fatalf("the push does not delete %s", setRoutes)
	}

	// Before the push writes, a sidecar labelled app=client by its own
	// metadata connects; no push holds the planner, which adopts it.
	nodeB := envoyNode("10.0.0.77", "pod-b", "c1", "NONE")
	nodeB.Metadata.Fields[xdsnode.MetadataLabels] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"app": structpb.NewStringValue("client")}})
	c.attach(attachment{}, nodeB, xdsnode.MetadataOf(nodeB.GetMetadata()))
	c.adoptBuilt()
	b := c.envoy.Node(nodeB.GetId())
	if b == nil || b.Proxy.Routes != class {
		t.Fatalf("the new sidecar is not adopted in class %v: %+v", class, b)
	}
	if got := rdsNames(t, b); !slices.Equal(got, []string{setRoutes}) {
		t.Fatalf("the new sidecar's listeners take routes %v, want %s", got, setRoutes)
	}

	applyAll(ws)
	if !c.envoyRoutes.has(setRoutes) {
		t.Errorf("the push deleted %s, which the sidecar adopted since names", setRoutes)
	}
	if _, ok := c.envoy.Routes()[setRoutes]; !ok {
		t.Errorf("the planner's record lacks %s", setRoutes)
	}
}
