package xdsgen

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// randomService returns a MergedService of echo with n endpoints spread over
// five clusters in two regions (and one without locality labels), some
// unready, some without a port, and some sharing an address.
func randomService(seed uint64, n int) *model.MergedService {
	r := rand.New(rand.NewPCG(seed, 1))
	clusters := []struct {
		id     model.ClusterID
		region string
	}{{"c1", "us-east"}, {"c2", "us-east"}, {"c3", "eu-west"}, {"c4", "eu-west"}, {"c5", ""}}
	eps := make([]model.Endpoint, 0, n)
	for range n {
		c := clusters[r.IntN(len(clusters))]
		loc := model.Locality{Region: c.region}
		if c.region != "" {
			loc.Zone = fmt.Sprintf("%s-%d", c.region, r.IntN(3))
			if r.IntN(4) == 0 {
				loc.SubZone = "rack-1"
			}
		}
		// A small address space makes duplicates likely.
		addr := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(4)), byte(r.IntN(256))})
		ports := map[string]uint32{"grpc": 50051, "http": 8081}
		switch r.IntN(10) {
		case 0:
			delete(ports, "http")
		case 1:
			ports["grpc"] = 0 // invalid target port
		}
		eps = append(eps, model.Endpoint{
			Cluster:  c.id,
			Address:  addr,
			Locality: loc,
			Ready:    r.IntN(5) != 0,
			Ports:    ports,
		})
	}
	return merged(eps...)
}

// TestLoadAssignmentsInvariants checks, on random inputs, every rule grpc-go
// applies to an EDS resource and the semantics LoadAssignments promises.
func TestLoadAssignmentsInvariants(t *testing.T) {
	groups := []ProxyGroup{
		{Cluster: "c1", Region: "us-east"},
		{Cluster: "c3", Region: "eu-west"},
		{Cluster: "c5"},
		{Cluster: "c1"},
		{Cluster: "unknown", Region: "us-east"},
	}
	for seed := range uint64(50) {
		ms := randomService(seed, 1+int(seed)*7)
		for _, g := range groups {
			clas := LoadAssignments(ms, g, nil)
			ports := servicePorts(ms.Service)
			if len(clas) != len(ports) {
				t.Fatalf("seed %d: %d assignments for %d ports", seed, len(clas), len(ports))
			}
			for i, cla := range clas {
				checkAssignment(t, fmt.Sprintf("seed %d group %s", seed, g), ms, ports[i], g, cla)
			}
		}
	}
}

func checkAssignment(t *testing.T, ctx string, ms *model.MergedService, sp model.ServicePort, g ProxyGroup, cla *endpointv3.ClusterLoadAssignment) {
	t.Helper()
	if want := ClusterName(ms.Service.Hostname, sp.Port); cla.GetClusterName() != want {
		t.Fatalf("%s: cluster name %q, want %q", ctx, cla.GetClusterName(), want)
	}

	// Expected: the best class of each eligible address, and the classes
	// present, in order.
	wantClass := map[netip.AddrPort]int{}
	for _, e := range ms.Endpoints {
		tp, ok := e.TargetPort(sp)
		if !e.Ready || !ok || !validPort(tp) {
			continue
		}
		ap := netip.AddrPortFrom(e.Address, uint16(tp))
		if c, seen := wantClass[ap]; !seen || classify(&e, g) < c {
			wantClass[ap] = classify(&e, g)
		}
	}
	var classes []int
	for _, c := range wantClass {
		if !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)

	seenAddr := map[netip.AddrPort]bool{}
	seenLocality := map[string]bool{}
	lastPriority := uint32(0)
	for i, lle := range cla.GetEndpoints() {
		l := lle.GetLocality()
		if l == nil {
			t.Fatalf("%s: locality %d has no Locality", ctx, i)
		}
		p := lle.GetPriority()
		if p < lastPriority {
			t.Errorf("%s: priorities out of order", ctx)
		}
		lastPriority = p
		if int(p) >= len(classes) {
			t.Fatalf("%s: priority %d but only %d classes", ctx, p, len(classes))
		}
		key := fmt.Sprintf("%d/%s/%s/%s", p, l.GetRegion(), l.GetZone(), l.GetSubZone())
		if seenLocality[key] {
			t.Errorf("%s: duplicate locality %s", ctx, key)
		}
		seenLocality[key] = true
		if n := len(lle.GetLbEndpoints()); n == 0 || lle.GetLoadBalancingWeight().GetValue() != uint32(n) {
			t.Errorf("%s: locality %s has %d endpoints, weight %v", ctx, key, n, lle.GetLoadBalancingWeight())
		}
		for _, lb := range lle.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			ap := netip.AddrPortFrom(netip.MustParseAddr(sa.GetAddress()), uint16(sa.GetPortValue()))
			if seenAddr[ap] {
				t.Errorf("%s: duplicate address %s", ctx, ap)
			}
			seenAddr[ap] = true
			c, ok := wantClass[ap]
			if !ok {
				t.Errorf("%s: unexpected endpoint %s", ctx, ap)
				continue
			}
			if classes[p] != c {
				t.Errorf("%s: %s at priority %d (class %d), want class %d", ctx, ap, p, classes[p], c)
			}
			if lb.GetHealthStatus() != corev3.HealthStatus_HEALTHY || lb.GetLoadBalancingWeight().GetValue() != 1 {
				t.Errorf("%s: %s: health %v weight %v", ctx, ap, lb.GetHealthStatus(), lb.GetLoadBalancingWeight())
			}
		}
	}
	if len(seenAddr) != len(wantClass) {
		t.Errorf("%s: %d endpoints, want %d", ctx, len(seenAddr), len(wantClass))
	}
	if len(classes) > 0 && int(lastPriority) != len(classes)-1 {
		t.Errorf("%s: last priority %d, want %d", ctx, lastPriority, len(classes)-1)
	}
}

// TestLoadAssignmentsDeterministic checks that the order of the input does
// not matter and that the output marshals to the same bytes every time.
func TestLoadAssignmentsDeterministic(t *testing.T) {
	ms := randomService(7, 500)
	want := LoadAssignments(ms, groupEast, nil)
	wantBytes := marshalAll(t, want)
	r := rand.New(rand.NewPCG(7, 7))
	for range 5 {
		shuffled := *ms
		shuffled.Endpoints = slices.Clone(ms.Endpoints)
		r.Shuffle(len(shuffled.Endpoints), func(i, j int) {
			shuffled.Endpoints[i], shuffled.Endpoints[j] = shuffled.Endpoints[j], shuffled.Endpoints[i]
		})
		got := LoadAssignments(&shuffled, groupEast, nil)
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("assignment %d differs after shuffling the input", i)
			}
		}
		if gotBytes := marshalAll(t, got); !slices.Equal(gotBytes, wantBytes) {
			t.Fatal("marshalled bytes differ after shuffling the input")
		}
	}
}

func marshalAll(t *testing.T, clas []*endpointv3.ClusterLoadAssignment) []byte {
	t.Helper()
	var out []byte
	for _, cla := range clas {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// TestLoadAssignmentsPure checks that the input is left untouched.
func TestLoadAssignmentsPure(t *testing.T) {
	ms := randomService(3, 100)
	before := slices.Clone(ms.Endpoints)
	svcBefore := *ms.Service
	LoadAssignments(ms, groupEast, nil)
	if !ms.Service.Equal(&svcBefore) {
		t.Error("service modified")
	}
	for i := range before {
		if !before[i].Equal(&ms.Endpoints[i]) {
			t.Fatalf("endpoint %d modified", i)
		}
	}
}

func TestLoadAssignmentsEdgeCases(t *testing.T) {
	if got := LoadAssignments(nil, groupEast, nil); got != nil {
		t.Errorf("nil service: %v", got)
	}
	if got := LoadAssignments(&model.MergedService{}, groupEast, nil); got != nil {
		t.Errorf("service without Service: %v", got)
	}

	// IPv4-mapped addresses are unmapped, so they collide with plain ones.
	ms := merged(
		ep("cluster-1", "::ffff:10.0.0.1", usEast1a, true),
		ep("cluster-2", "10.0.0.1", usEast1a, true),
		ep("cluster-2", "fd00::1", usEast1a, true),
	)
	cla := LoadAssignments(ms, groupEast, nil)[0]
	var addrs []string
	for _, lle := range cla.GetEndpoints() {
		for _, lb := range lle.GetLbEndpoints() {
			addrs = append(addrs, fmt.Sprintf("p%d %s", lle.GetPriority(), lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()))
		}
	}
	if want := []string{"p0 10.0.0.1", "p1 fd00::1"}; !slices.Equal(addrs, want) {
		t.Errorf("addresses %q, want %q", addrs, want)
	}

	// An endpoint without a valid address is skipped.
	bad := ep("cluster-1", "10.0.0.9", usEast1a, true)
	bad.Address = netip.Addr{}
	if cla := LoadAssignments(merged(bad), groupEast, nil)[0]; len(cla.GetEndpoints()) != 0 {
		t.Errorf("endpoint without address included: %v", cla)
	}
}

func TestServicePorts(t *testing.T) {
	svc := &model.Service{Hostname: echoHost, Ports: []model.ServicePort{
		{Name: "b", Port: 9090},
		{Name: "zero", Port: 0},
		{Name: "a", Port: 8080},
		{Name: "a-again", Port: 8080},
		{Name: "huge", Port: 70000},
	}}
	got := servicePorts(svc)
	want := []model.ServicePort{{Name: "a", Port: 8080}, {Name: "b", Port: 9090}}
	if !slices.Equal(got, want) {
		t.Errorf("servicePorts = %v, want %v", got, want)
	}
	for name, n := range map[string]int{
		"listeners": len(Listeners(svc)), "routes": len(Routes(svc, istioconfig.HostConfig{}, "")), "clusters": len(Clusters(svc, nil)),
	} {
		if n != 2 {
			t.Errorf("%d %s, want 2", n, name)
		}
	}
	if Listeners(nil) != nil || Routes(nil, istioconfig.HostConfig{}, "") != nil || Clusters(nil, nil) != nil {
		t.Error("nil service yields resources")
	}
}

func TestDomains(t *testing.T) {
	// A hostname not of the Kubernetes form gets no short names.
	svc := &model.Service{Hostname: "api.example.com", Name: "api", Namespace: "prod"}
	if got, want := domains(svc, 443), []string{"api.example.com", "api.example.com:443"}; !slices.Equal(got, want) {
		t.Errorf("domains = %q, want %q", got, want)
	}
}

// TestResourcesReferToEachOther follows the chain a grpc-go client walks.
func TestResourcesReferToEachOther(t *testing.T) {
	svc := echoService()
	ls, rs, cs := Listeners(svc), Routes(svc, istioconfig.HostConfig{}, ""), Clusters(svc, nil)
	clas := LoadAssignments(fleet(true), groupEast, nil)
	for i, p := range servicePorts(svc) {
		h, port, err := ParseListenerName(ls[i].GetName())
		if err != nil || h != svc.Hostname || port != p.Port {
			t.Errorf("listener %q parses to %q, %d, %v", ls[i].GetName(), h, port, err)
		}
		hcm := new(hcmv3.HttpConnectionManager)
		if err := ls[i].GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
			t.Fatalf("listener %q: %v", ls[i].GetName(), err)
		}
		if hcm.GetRds().GetConfigSource().GetAds() == nil || hcm.GetRds().GetRouteConfigName() != rs[i].GetName() {
			t.Errorf("listener %q: RDS %v, want %q over ADS", ls[i].GetName(), hcm.GetRds(), rs[i].GetName())
		}
		filters := hcm.GetHttpFilters()
		if len(filters) == 0 || !filters[len(filters)-1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
			t.Errorf("listener %q: last HTTP filter is not the router: %v", ls[i].GetName(), filters)
		}
		if rs[i].GetName() != RouteName(svc.Hostname, p.Port) {
			t.Errorf("route %d named %q", i, rs[i].GetName())
		}
		vh := rs[i].GetVirtualHosts()[0]
		if !slices.Contains(vh.GetDomains(), ls[i].GetName()) {
			t.Errorf("virtual host %q does not match the dial target authority %q", vh.GetName(), ls[i].GetName())
		}
		cluster := vh.GetRoutes()[0].GetRoute().GetCluster()
		if cluster != cs[i].GetName() {
			t.Errorf("route points to %q, cluster is %q", cluster, cs[i].GetName())
		}
		if cs[i].GetType() != clusterv3.Cluster_EDS || cs[i].GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("cluster %q is not EDS over ADS", cs[i].GetName())
		}
		if got := cs[i].GetEdsClusterConfig().GetServiceName(); got != clas[i].GetClusterName() {
			t.Errorf("cluster asks for EDS %q, assignment is %q", got, clas[i].GetClusterName())
		}
	}
}

// TestClassifyEntryEndpoint: an endpoint of no cluster (a ServiceEntry's)
// is local to proxies of its region, whatever their cluster, and remote
// to the others.
func TestClassifyEntryEndpoint(t *testing.T) {
	ep := model.Endpoint{Address: netip.MustParseAddr("10.9.0.1"), Locality: model.Locality{Region: "r1"}}
	for _, tc := range []struct {
		g    ProxyGroup
		want int
	}{
		{ProxyGroup{Cluster: "c1", Region: "r1"}, classLocal},
		{ProxyGroup{Cluster: "c2", Region: "r1"}, classLocal},
		{ProxyGroup{Cluster: "c1", Region: "r2"}, classRemote},
		{ProxyGroup{Cluster: "c1"}, classRemote},
	} {
		if got := classify(&ep, tc.g); got != tc.want {
			t.Errorf("group %+v: class %d, want %d", tc.g, got, tc.want)
		}
	}
}
