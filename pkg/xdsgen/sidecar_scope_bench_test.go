package xdsgen

import (
	"fmt"
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/model"
)

// scopeBenchServices is a mesh of 1,000 HTTP services, 20 in each of 50
// namespaces, each with two endpoints.
func scopeBenchServices() []*model.MergedService {
	var out []*model.MergedService
	for i := range 1000 {
		ns := fmt.Sprintf("ns-%02d", i/20)
		ms := svcOn(fmt.Sprintf("svc-%03d", i), ns, uint32(8000+i%50), model.ProtocolHTTP)
		for j := range 2 {
			ms.Endpoints = append(ms.Endpoints, model.Endpoint{
				Cluster: "cluster-1", Address: netip.AddrFrom4([4]byte{10, byte(j), byte(i >> 8), byte(i)}), Ready: true,
				Ports: map[string]uint32{"p": 9000},
			})
		}
		out = append(out, ms)
	}
	return out
}

// BenchmarkSidecarScope: what one Envoy sidecar of namespace ns-00 holds
// (its listeners, clusters and routes, counted and marshalled) and what
// building them costs, without a Sidecar and with the usual namespace scope
// egress ["./*", "istio-system/*"]: resources/proxy and bytes/proxy side
// by side.
func BenchmarkSidecarScope(b *testing.B) {
	services := scopeBenchServices()
	for _, c := range []struct {
		name  string
		scope bool
	}{{"none", false}, {"namespace", true}} {
		b.Run("scope="+c.name, func(b *testing.B) {
			sc := Sidecar{IP: netip.MustParseAddr("10.200.0.1"), Namespace: "ns-00", Interception: InterceptRedirect}
			if c.scope {
				sc.Scope = scope("ns-00", false, "./*", "istio-system/*")
			}
			var resources, bytes, routeBytes int
			b.ReportAllocs()
			for b.Loop() {
				resources, bytes = 0, 0
				for _, l := range SidecarListeners(services, sc, Options{}) {
					resources++
					bytes += proto.Size(l)
				}
				for _, cl := range SidecarClusters(services, nil, sc, Options{}) {
					resources++
					bytes += proto.Size(cl)
				}
				// The routes its listeners take: those of its route set,
				// shared with the sidecars of the same set.
				routeBytes = 0
				for _, rc := range SidecarSetRoutes(services, nil, sc.RouteSet(), Options{}) {
					resources++
					routeBytes += proto.Size(rc)
				}
				bytes += routeBytes
			}
			b.ReportMetric(float64(resources), "resources/proxy")
			b.ReportMetric(float64(bytes), "bytes/proxy")
			b.ReportMetric(float64(routeBytes), "route-bytes/proxy")
		})
	}
}
