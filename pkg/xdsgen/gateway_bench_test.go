package xdsgen

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// routeBenchConfig is the configuration of BenchmarkRouteChange: one
// VirtualService per service of services (1,000), each routing to its
// service; bound to the Gateway ingress/public (server port 80, every
// host) with the host h<i>.example.com when gateway is set, else to the
// mesh with the service's hostname. version changes the timeout of the
// first VirtualService: the one route change of the benchmark.
func routeBenchConfig(services []*model.MergedService, gateway bool, version int) *istioconfig.Snapshot {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var objs []istioconfig.Object
	if gateway {
		objs = append(objs, &istioconfig.Gateway{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "Gateway", Namespace: "ingress", Name: "public"}, Created: created},
			Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: []*networking.Server{{
				Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"},
			}}},
		})
	}
	for i, ms := range services {
		svc := ms.Service
		spec := &networking.VirtualService{Http: []*networking.HTTPRoute{{
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(svc.Hostname)}}},
		}}}
		if gateway {
			spec.Hosts, spec.Gateways = []string{fmt.Sprintf("h%d.example.com", i)}, []string{"ingress/public"}
		} else {
			spec.Hosts = []string{string(svc.Hostname)}
		}
		gen := int64(1)
		if i == 0 && version > 0 {
			gen = int64(version + 1)
			spec.Http[0].Timeout = durationpb.New(time.Duration(version) * time.Second)
		}
		objs = append(objs, &istioconfig.VirtualService{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: svc.Namespace, Name: svc.Name},
				Generation: gen, Created: created},
			Spec: spec,
		})
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
}

// BenchmarkRouteChange: what one VirtualService change costs the hub's
// Envoy planner, and what it writes, when it reaches a gateway (1,000
// hosts on one Gateway, the router held by the planner) beside the same
// change reaching a sidecar (1,000 mesh hosts; a sidecar's routes are the
// shared route configurations of its route set): the time per change,
// the resources and bytes (marshalled) a change writes, and what the
// proxy holds.
func BenchmarkRouteChange(b *testing.B) {
	services := scopeBenchServices()
	for _, c := range []struct {
		name   string
		router bool
	}{{"gateway", true}, {"sidecar", false}} {
		b.Run("proxy="+c.name, func(b *testing.B) {
			cfgs := [2]*istioconfig.Snapshot{routeBenchConfig(services, c.router, 1), routeBenchConfig(services, c.router, 2)}
			node := SidecarNode{Cluster: "cluster-1", Proxy: Sidecar{IP: netip.MustParseAddr("10.200.0.1"), Namespace: "ingress", Router: c.router},
				Claimed: Workload{Namespace: "ingress", Labels: model.NewLabels(map[string]string{"istio": "ingressgateway"})}}
			p := NewSidecarPlanner(Options{})
			n, built := BuildSidecar(node, services, cfgs[0], Options{})
			p.Adopt("node", n, built, services, cfgs[0], false)
			// The planner knows every service's shape, as after the
			// hub's first push.
			all := make([]ServiceUpdate, len(services))
			for i, ms := range services {
				all[i] = ServiceUpdate{Hostname: ms.Service.Hostname, Service: ms}
			}
			p.Plan(all, services, cfgs[0], false)
			// The change: the hub passes the host whose configuration
			// changed (a mesh VirtualService's); a Gateway's
			// VirtualService changes no host's.
			var changed []ServiceUpdate
			if !c.router {
				changed = all[:1]
			}
			held := 0
			for _, byName := range built {
				for _, r := range byName {
					held += proto.Size(r)
				}
			}
			for _, r := range p.Routes() {
				held += proto.Size(r)
			}
			var written, bytes int
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				plan := p.Plan(changed, services, cfgs[i%2], false)
				written, bytes = 0, 0
				for _, byType := range plan.Nodes {
					for _, ch := range byType {
						for _, r := range ch.Upsert {
							written++
							bytes += proto.Size(r)
						}
					}
				}
				for _, r := range plan.Routes.Upsert {
					written++
					bytes += proto.Size(r)
				}
				if written == 0 {
					b.Fatal("a VirtualService change wrote nothing")
				}
			}
			b.ReportMetric(float64(written), "resources-written/change")
			b.ReportMetric(float64(bytes), "bytes-written/change")
			b.ReportMetric(float64(held), "bytes-held/proxy")
		})
	}
}
