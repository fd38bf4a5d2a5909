package xdsgen

import (
	"slices"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func scope(ns string, registryOnly bool, hosts ...string) *istioconfig.Sidecar {
	spec := &networking.Sidecar{}
	if hosts != nil {
		spec.Egress = []*networking.IstioEgressListener{{Hosts: hosts}}
	}
	if registryOnly {
		spec.OutboundTrafficPolicy = &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY}
	}
	return &istioconfig.Sidecar{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "Sidecar", Namespace: ns, Name: "default"}}, Spec: spec}
}

// TestSidecarScope: a Sidecar's egress hosts limit the outbound listeners
// and clusters a sidecar gets to the services they name; the inbound side
// and the static clusters stay; REGISTRY_ONLY sends unknown destinations
// to the black hole.
func TestSidecarScope(t *testing.T) {
	services := append(sidecarServices(), svcOn("other", "elsewhere", 5000, model.ProtocolHTTP))
	for _, m := range []Interception{InterceptRedirect, InterceptNone} {
		all := sidecarOf(m)
		scoped := sidecarOf(m)
		scoped.Scope = scope("demo", false, "./tcp-echo.demo.svc.cluster.local")

		clusterNames := func(sc Sidecar) []string {
			var out []string
			for _, c := range SidecarClusters(services, nil, sc, Options{}) {
				out = append(out, c.GetName())
			}
			return out
		}
		full, narrow := clusterNames(all), clusterNames(scoped)
		for _, want := range []string{ClusterName("other.elsewhere.svc.cluster.local", 5000), ClusterName("echo.demo.svc.cluster.local", 8080)} {
			if !slices.Contains(full, want) || slices.Contains(narrow, want) {
				t.Errorf("%s: cluster %s: in all %t, in scoped %t; want only without scope", m, want, slices.Contains(full, want), slices.Contains(narrow, want))
			}
		}
		for _, want := range []string{ClusterName("tcp-echo.demo.svc.cluster.local", 9000), InboundClusterName(8081), PassthroughClusterName, BlackHoleClusterName} {
			if !slices.Contains(narrow, want) {
				t.Errorf("%s: scoped clusters %v lack %s", m, narrow, want)
			}
		}

		outbound := func(sc Sidecar) []string {
			var out []string
			for _, l := range SidecarListeners(services, sc, Options{}) {
				if n := l.GetName(); !strings.HasPrefix(n, "virtual") && !strings.Contains(n, sidecarPodIP.String()) {
					out = append(out, n)
				}
			}
			return out
		}
		// 9000 is the scoped service's port; 8080, 7070 and 5000 go.
		if got := outbound(scoped); len(got) != 1 || !strings.HasSuffix(got[0], "_9000") {
			t.Errorf("%s: scoped outbound listeners %v, want only port 9000's (all: %v)", m, got, outbound(all))
		}
	}

	catchAll := func(sc Sidecar) string {
		for _, l := range SidecarListeners(services, sc, Options{}) {
			if l.GetName() == VirtualOutboundListenerName {
				fc := l.GetFilterChains()[len(l.GetFilterChains())-1]
				return string(fc.GetFilters()[0].GetTypedConfig().GetValue())
			}
		}
		return ""
	}
	open, closed := sidecarOf(InterceptRedirect), sidecarOf(InterceptRedirect)
	open.Scope = scope("demo", false, "./*")
	closed.Scope = scope("demo", true, "./*")
	if got := catchAll(open); !strings.Contains(got, PassthroughClusterName) {
		t.Errorf("ALLOW_ANY: the catch-all goes to %q, want %s", got, PassthroughClusterName)
	}
	if got := catchAll(closed); !strings.Contains(got, BlackHoleClusterName) || strings.Contains(got, PassthroughClusterName) {
		t.Errorf("REGISTRY_ONLY: the catch-all goes to %q, want %s", got, BlackHoleClusterName)
	}
}

// TestSidecarScopeEgressPort: an egress listener with a port names its
// hosts on that port only: of echo (8080 and 7070), a sidecar scoped to
// "./*" on 7070 gets the 7070 listener and cluster alone; another egress
// listener without a port brings a service back whole; the narrowed
// service is a copy, the registry's stays as it was.
func TestSidecarScopeEgressPort(t *testing.T) {
	services := sidecarServices()
	sc := sidecarOf(InterceptRedirect)
	sc.Scope = scope("demo", false)
	sc.Scope.Spec.Egress = []*networking.IstioEgressListener{
		{Port: &networking.SidecarPort{Number: 7070, Protocol: "GRPC", Name: "grpc"}, Hosts: []string{"./*"}},
	}
	var names []string
	for _, c := range SidecarClusters(services, nil, sc, Options{}) {
		if strings.HasPrefix(c.GetName(), clusterNamePrefix) {
			names = append(names, c.GetName())
		}
	}
	if want := []string{ClusterName("echo.demo.svc.cluster.local", 7070)}; !slices.Equal(names, want) {
		t.Errorf("outbound clusters %v, want %v", names, want)
	}
	echo := services[1] // the fixture lists tcp-echo first
	if got := ScopedServices(services, sc); len(got) != 1 || len(got[0].Service.Ports) != 1 || len(echo.Service.Ports) != 2 {
		t.Errorf("scoped %v; the registry's echo has %d ports", got, len(echo.Service.Ports))
	}

	sc.Scope.Spec.Egress = append(sc.Scope.Spec.Egress, &networking.IstioEgressListener{Hosts: []string{"./tcp-echo.demo.svc.cluster.local"}})
	got := ScopedServices(services, sc)
	if len(got) != 2 || got[0] != services[0] || len(got[1].Service.Ports) != 1 {
		t.Errorf("with a portless listener for tcp-echo: %v, want echo narrowed and tcp-echo whole", got)
	}
}

// TestSidecarScopedRoutes: a scoped sidecar's listeners take the routes of
// its route set, which hold the virtual hosts of the services its scope
// sees only (a host out of scope gets Envoy's 404, not a route to a
// cluster it lacks); a Sidecar without egress listeners scopes nothing
// and keeps the default routes.
func TestSidecarScopedRoutes(t *testing.T) {
	// other.elsewhere shares port 8080 with echo.demo.
	services := append(sidecarServices(), svcOn("other", "elsewhere", 8080, model.ProtocolHTTP))
	vhosts := func(set RouteSet, port uint32) (string, []string) {
		for _, rc := range SidecarSetRoutes(services, nil, set, Options{}) {
			if strings.HasPrefix(rc.GetName(), SidecarRouteName(port)) {
				var out []string
				for _, vh := range rc.GetVirtualHosts() {
					out = append(out, vh.GetName())
				}
				return rc.GetName(), out
			}
		}
		return "", nil
	}
	sc := sidecarOf(InterceptNone)
	sc.Scope = scope("demo", false, "./*")
	set := sc.RouteSet()
	if set.IsDefault() || set.Scope != sc.Scope {
		t.Fatalf("scoped sidecar's route set %v", set)
	}
	name, got := vhosts(set, 8080)
	if want := SidecarRouteSetName(8080, set); name != want || !strings.HasPrefix(name, "8080~") {
		t.Errorf("scoped routes named %q, want %q", name, want)
	}
	if want := []string{"echo.demo.svc.cluster.local:8080"}; !slices.Equal(got, want) {
		t.Errorf("scoped virtual hosts %v, want %v", got, want)
	}
	if _, all := vhosts(RouteSet{}, 8080); len(all) != 2 {
		t.Errorf("default virtual hosts %v, want both services of port 8080", all)
	}
	for _, l := range SidecarListeners(services, sc, Options{}) {
		for _, fc := range l.GetFilterChains() {
			h := &hcmv3.HttpConnectionManager{}
			if len(fc.GetFilters()) == 1 && fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(h) == nil && h.GetRds() != nil &&
				!strings.HasSuffix(h.GetRds().GetRouteConfigName(), "~"+set.Name()) {
				t.Errorf("listener %s takes routes %q, not its set's", l.GetName(), h.GetRds().GetRouteConfigName())
			}
		}
	}

	ingressOnly := sidecarOf(InterceptNone)
	ingressOnly.Scope = &istioconfig.Sidecar{Spec: &networking.Sidecar{Ingress: []*networking.IstioIngressListener{
		{Port: &networking.SidecarPort{Number: 9080, Protocol: "HTTP"}}}}}
	if !ingressOnly.RouteSet().IsDefault() {
		t.Errorf("a Sidecar without egress listeners gives route set %v, want the default", ingressOnly.RouteSet())
	}
	// The name follows the scope's identity and generation.
	next := *sc.Scope
	next.Generation++
	if a, b := set.Name(), (RouteSet{Scope: &next}).Name(); a == b || len(a) != 16 {
		t.Errorf("route set names %q and %q, want distinct 16-digit names", a, b)
	}
}
