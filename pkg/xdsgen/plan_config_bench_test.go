package xdsgen

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// The mesh of BenchmarkPlanConfigChange: configMeshServices services of
// two ports each (grpc 8080, http 9090) in namespace configMeshNamespace,
// every one with a VirtualService splitting its traffic between subsets
// v1 and v2 and a DestinationRule defining them, served to
// len(configMeshGroups) proxy groups.
const (
	configMeshServices  = 1000
	configMeshNamespace = "bench"
)

var configMeshGroups = []ProxyGroup{
	{Cluster: "cluster-1", Region: "us-east"},
	{Cluster: "cluster-2", Region: "us-east"},
	{Cluster: "cluster-3", Region: "eu-west"},
	{Cluster: "cluster-4", Region: "eu-west"},
}

// configMesh is the registry's view of the mesh and the objects that
// configure it.
type configMesh struct {
	names  []string // the services' names, which the objects' hosts are
	hosts  []model.Hostname
	byHost map[model.Hostname]*model.MergedService
	vs     []*istioconfig.VirtualService
	dr     []*istioconfig.DestinationRule
}

func newConfigMesh() *configMesh {
	m := &configMesh{byHost: map[model.Hostname]*model.MergedService{}}
	// Two label sets for the whole mesh, interned as the registry does.
	versions := []model.Labels{
		model.NewLabels(map[string]string{"app": "svc", "version": "v1", TLSModeLabel: TLSModeIstio}),
		model.NewLabels(map[string]string{"app": "svc", "version": "v2", TLSModeLabel: TLSModeIstio}),
	}
	for s := range configMeshServices {
		name := fmt.Sprintf("svc-%04d", s)
		h := model.ServiceHostname(name, configMeshNamespace, "")
		m.names = append(m.names, name)
		m.hosts = append(m.hosts, h)
		m.byHost[h] = configMeshService(h, name, s, versions)
		m.vs = append(m.vs, splitService(name, 90))
		m.dr = append(m.dr, subsetsRule(name, networking.LoadBalancerSettings_ROUND_ROBIN))
	}
	return m
}

// configMeshService is service s with four endpoints, one per cluster of
// configMeshGroups, alternately of versions v1 and v2.
func configMeshService(h model.Hostname, name string, s int, versions []model.Labels) *model.MergedService {
	svc := &model.Service{
		Hostname: h, Name: name, Namespace: configMeshNamespace,
		Ports: []model.ServicePort{
			{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC},
			{Name: "http", Port: 9090, Protocol: model.ProtocolHTTP},
		},
	}
	ms := &model.MergedService{Service: svc}
	for i, g := range configMeshGroups {
		addr := netip.AddrFrom4([4]byte{10, byte(i + 1), byte(s >> 8), byte(s)})
		ms.Endpoints = append(ms.Endpoints, model.Endpoint{
			Cluster:  g.Cluster,
			Address:  addr,
			Locality: model.Locality{Region: g.Region, Zone: g.Region + "-1a"},
			Ready:    true,
			Pod:      name + "-" + addr.String(),
			Labels:   versions[i%len(versions)],
			Ports:    map[string]uint32{"grpc": 50051, "http": 8081},
		})
		ms.Clusters = append(ms.Clusters, g.Cluster)
	}
	model.SortEndpoints(ms.Endpoints)
	return ms
}

func configMeta(kind, name string) istioconfig.Meta {
	return istioconfig.Meta{
		Key:        istioconfig.Key{Kind: kind, Namespace: configMeshNamespace, Name: name},
		Generation: 1,
		Created:    time.Unix(0, 0),
	}
}

// splitService is the VirtualService of host name sending v1 percent of
// its traffic to subset v1 and the rest to v2.
func splitService(name string, v1 int32) *istioconfig.VirtualService {
	return &istioconfig.VirtualService{
		Meta: configMeta("VirtualService", name),
		Spec: &networking.VirtualService{
			Hosts: []string{name},
			Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: name, Subset: "v1"}, Weight: v1},
					{Destination: &networking.Destination{Host: name, Subset: "v2"}, Weight: 100 - v1},
				},
			}},
		},
	}
}

// subsetsRule is the DestinationRule of host name with subsets v1 and v2
// (by the version label) and load balancer lb.
func subsetsRule(name string, lb networking.LoadBalancerSettings_SimpleLB) *istioconfig.DestinationRule {
	return &istioconfig.DestinationRule{
		Meta: configMeta("DestinationRule", name),
		Spec: &networking.DestinationRule{
			Host: name,
			TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{
					LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb},
				},
			},
			Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			},
		},
	}
}

// snapshot indexes the mesh's objects with those of replace in place of
// the ones of the same key.
func (m *configMesh) snapshot(replace ...istioconfig.Object) *istioconfig.Snapshot {
	objs := make([]istioconfig.Object, 0, len(m.vs)+len(m.dr)+len(replace))
	for i := range m.vs {
		objs = append(objs, m.vs[i], m.dr[i])
	}
	// NewSnapshot keeps the last object of a key.
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, append(objs, replace...))
}

// updates are the registry views of hosts, for Plan.
func (m *configMesh) updates(hosts []model.Hostname) []ServiceUpdate {
	out := make([]ServiceUpdate, len(hosts))
	for i, h := range hosts {
		out[i] = ServiceUpdate{Hostname: h, Service: m.byHost[h]}
	}
	return out
}

// planned builds a Planner that tracks every group and has planned the
// whole mesh under config s.
func (m *configMesh) planned(s *istioconfig.Snapshot) *Planner {
	p := NewPlanner(Options{})
	for _, g := range configMeshGroups {
		p.AddGroup(g, nil)
	}
	p.SetConfig(s, m.hosts)
	p.Plan(m.updates(m.hosts))
	return p
}

// upserted counts the resources plan puts, in every cache.
func upserted(plan Plan) int {
	n := 0
	for _, c := range plan.Shared {
		n += len(c.Upsert)
	}
	for _, c := range plan.Groups {
		n += len(c.Upsert)
	}
	return n
}

// BenchmarkPlanConfigChange measures what one Istio config change costs
// the planner (SetConfig, then Plan of the hosts it returns) in a mesh of
// 1,000 two-port services, each with a VirtualService and a
// DestinationRule of two subsets, served to four proxy groups:
//
//   - change=virtualservice: one host's VirtualService is replaced by one
//     of other weights (its route configurations change);
//   - change=destinationrule: one host's DestinationRule is replaced by
//     one of another load balancer (its clusters change; its groups' load
//     assignments are rebuilt and found equal);
//   - change=peerauthentication: the namespace's PeerAuthentication goes
//     from DISABLE to STRICT, so every host's clusters gain mutual TLS
//     (auto mTLS) and all 1,000 hosts are planned again;
//   - change=all-hosts: every object is replaced and every VirtualService
//     has other weights, so all 1,000 hosts are rebuilt, what planning
//     every host on any change would cost;
//   - new-snapshot: istioconfig.NewSnapshot of the 2,000 objects, which
//     the hub pays once per change on top of the planning; the change=
//     benchmarks alternate between two prepared snapshots and leave it out;
//   - initial: a new Planner tracking the four groups plans the whole
//     mesh, from nothing.
//
// Metrics: hosts/op, the hosts SetConfig returned and Plan
// rebuilt; upserted/op, the resources the plan writes, in every cache.
func BenchmarkPlanConfigChange(b *testing.B) {
	m := newConfigMesh()
	base := m.snapshot()
	b.Run("change=virtualservice", func(b *testing.B) {
		benchConfigChange(b, m, base, m.snapshot(splitService(m.names[0], 80)))
	})
	b.Run("change=destinationrule", func(b *testing.B) {
		benchConfigChange(b, m, base, m.snapshot(subsetsRule(m.names[0], networking.LoadBalancerSettings_LEAST_REQUEST)))
	})
	b.Run("change=peerauthentication", func(b *testing.B) {
		pa := func(mode securityv1beta1.PeerAuthentication_MutualTLS_Mode) *istioconfig.PeerAuthentication {
			return &istioconfig.PeerAuthentication{Meta: configMeta("PeerAuthentication", "default"),
				Spec: &securityv1beta1.PeerAuthentication{Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: mode}}}
		}
		benchConfigChange(b, m, m.snapshot(pa(securityv1beta1.PeerAuthentication_MutualTLS_DISABLE)),
			m.snapshot(pa(securityv1beta1.PeerAuthentication_MutualTLS_STRICT)))
	})
	b.Run("change=all-hosts", func(b *testing.B) {
		var all []istioconfig.Object
		for _, name := range m.names {
			all = append(all, splitService(name, 80), subsetsRule(name, networking.LoadBalancerSettings_ROUND_ROBIN))
		}
		benchConfigChange(b, m, base, m.snapshot(all...))
	})
	b.Run("new-snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.snapshot()
		}
		b.ReportMetric(float64(len(m.vs)+len(m.dr)), "objects/op")
	})
	b.Run("initial", func(b *testing.B) {
		var plan Plan
		b.ReportAllocs()
		for b.Loop() {
			p := NewPlanner(Options{})
			for _, g := range configMeshGroups {
				p.AddGroup(g, nil)
			}
			p.SetConfig(base, m.hosts)
			plan = p.Plan(m.updates(m.hosts))
		}
		b.ReportMetric(float64(len(m.hosts)), "hosts/op")
		b.ReportMetric(float64(upserted(plan)), "upserted/op")
	})
}

// benchConfigChange plans, op after op, the change from one snapshot to
// the other and back, on a Planner that has planned the mesh under a.
func benchConfigChange(b *testing.B, m *configMesh, a, c *istioconfig.Snapshot) {
	p := m.planned(a)
	next := [2]*istioconfig.Snapshot{c, a}
	var hosts, written, ops int
	b.ReportAllocs()
	for b.Loop() {
		changed := p.SetConfig(next[ops%2], m.hosts)
		plan := p.Plan(m.updates(changed))
		hosts += len(changed)
		written += upserted(plan)
		ops++
	}
	if written == 0 {
		b.Fatal("the change wrote nothing: the benchmark measures no real change")
	}
	b.ReportMetric(float64(hosts)/float64(ops), "hosts/op")
	b.ReportMetric(float64(written)/float64(ops), "upserted/op")
}
