package istioconfig_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func entryObj(name string, age int, spec *networking.ServiceEntry) *istioconfig.ServiceEntry {
	return &istioconfig.ServiceEntry{Meta: istioconfig.Meta{
		Key:        istioconfig.Key{Kind: "ServiceEntry", Namespace: "demo", Name: name},
		Generation: 1, Created: epoch.Add(-time.Duration(age) * time.Hour),
	}, Spec: spec}
}

var entryPorts = []*networking.ServicePort{
	{Number: 443, Name: "https", Protocol: "HTTPS"},
	{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080},
	{Number: 9000, Name: "grpc", Protocol: "GRPC"},
}

// TestEntryService: a ServiceEntry becomes its hosts' services — ports by
// number with their protocols, STATIC endpoints by address with their
// ports (own, else targetPort, else number), locality, labels and service
// account; DNS ones by name, the host itself when it lists none; NONE,
// DYNAMIC_DNS and workloadSelector entries give no service.
func TestEntryService(t *testing.T) {
	static := entryObj("ext", 0, &networking.ServiceEntry{
		Hosts: []string{"API.ext.test", "*.wild.test"}, Ports: entryPorts,
		Location: networking.ServiceEntry_MESH_EXTERNAL, Resolution: networking.ServiceEntry_STATIC,
		Endpoints: []*networking.WorkloadEntry{
			{Address: "10.9.0.2", Ports: map[string]uint32{"grpc": 9443}, Locality: "r1/z1", Labels: map[string]string{"v": "1"}, ServiceAccount: "api"},
			{Address: "10.9.0.1"},
			{Address: "unix:///var/run/api.sock"},
		},
	})
	ms := istioconfig.EntryService("api.ext.test", static)
	wantPorts := []model.ServicePort{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP},
		{Name: "https", Port: 443, Protocol: model.ProtocolTCP}, {Name: "grpc", Port: 9000, Protocol: model.ProtocolGRPC}}
	if !reflect.DeepEqual(ms.Service.Ports, wantPorts) || !ms.Service.External || ms.Service.Resolution != model.ResolutionEndpoints {
		t.Errorf("service %+v", ms.Service)
	}
	if len(ms.Endpoints) != 2 {
		t.Fatalf("endpoints %+v, want the two addresses", ms.Endpoints)
	}
	e1, e2 := ms.Endpoints[0], ms.Endpoints[1]
	if e1.Address != netip.MustParseAddr("10.9.0.1") || !e1.Ready ||
		!reflect.DeepEqual(e1.Ports, map[string]uint32{"http": 8080, "https": 443, "grpc": 9000}) {
		t.Errorf("first endpoint %+v", e1)
	}
	if e2.Ports["grpc"] != 9443 || e2.Locality != (model.Locality{Region: "r1", Zone: "z1"}) || e2.ServiceAccount != "api" {
		t.Errorf("second endpoint %+v", e2)
	}
	if v, _ := e2.Labels.Get("v"); v != "1" {
		t.Errorf("labels %v", e2.Labels)
	}

	dns := entryObj("dns", 0, &networking.ServiceEntry{
		Hosts: []string{"db.ext.test"}, Ports: entryPorts, Resolution: networking.ServiceEntry_DNS,
		Endpoints: []*networking.WorkloadEntry{{Address: "db-1.ext.test", Weight: 3, Locality: "r2"}, {Address: "db-2.ext.test"}},
	})
	ms = istioconfig.EntryService("db.ext.test", dns)
	// location defaults to MESH_EXTERNAL, the enum's zero value.
	if !ms.Service.External || ms.Service.Resolution != model.ResolutionDNS || len(ms.Endpoints) != 0 {
		t.Errorf("DNS service %+v", ms)
	}
	want := []model.DNSEndpoint{
		{Host: "db-1.ext.test", Ports: map[string]uint32{"http": 8080, "https": 443, "grpc": 9000}, Locality: model.Locality{Region: "r2"}, Weight: 3},
		{Host: "db-2.ext.test", Ports: map[string]uint32{"http": 8080, "https": 443, "grpc": 9000}},
	}
	if !reflect.DeepEqual(ms.Service.DNSEndpoints, want) {
		t.Errorf("DNS endpoints %+v", ms.Service.DNSEndpoints)
	}
	self := entryObj("self", 0, &networking.ServiceEntry{Hosts: []string{"self.ext.test"}, Ports: entryPorts[:1],
		Resolution: networking.ServiceEntry_DNS_ROUND_ROBIN})
	if ms := istioconfig.EntryService("self.ext.test", self); ms.Service.Resolution != model.ResolutionDNSRoundRobin ||
		len(ms.Service.DNSEndpoints) != 1 || ms.Service.DNSEndpoints[0].Host != "self.ext.test" {
		t.Errorf("DNS without endpoints %+v", ms.Service)
	}
	for _, spec := range []*networking.ServiceEntry{
		{Hosts: []string{"x.test"}, Ports: entryPorts, Resolution: networking.ServiceEntry_NONE},
		{Hosts: []string{"x.test"}, Ports: entryPorts, Resolution: networking.ServiceEntry_DYNAMIC_DNS},
		{Hosts: []string{"x.test"}, Ports: entryPorts, Resolution: networking.ServiceEntry_STATIC,
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "x"}}},
	} {
		e := entryObj("x", 0, spec)
		if ms := istioconfig.EntryService("x.test", e); ms != nil {
			t.Errorf("%v gives a service: %+v", spec, ms)
		}
		if len(istioconfig.EntryNotes(e)) == 0 {
			t.Errorf("%v: no note says why the host gets nothing", spec)
		}
	}
	notes := strings.Join(istioconfig.EntryNotes(static), "\n")
	for _, n := range []string{`hosts[1]: wildcard host "*.wild.test"`, `endpoints[2].address: "unix:///var/run/api.sock" is not an IP address`} {
		if !strings.Contains(notes, n) {
			t.Errorf("notes %q lack %q", notes, n)
		}
	}
}

// TestSnapshotEntries: the oldest entry of a host wins it (the other is
// shadowed there), hosts are lower-cased, a MESH_INTERNAL entry's
// endpoints join the Kubernetes Service of its host, and EntriesChanged
// names the hosts whose winning entry differs.
func TestSnapshotEntries(t *testing.T) {
	spec := func(host, addr string) *networking.ServiceEntry {
		return &networking.ServiceEntry{Hosts: []string{host}, Ports: entryPorts[2:], Resolution: networking.ServiceEntry_STATIC,
			Location: networking.ServiceEntry_MESH_INTERNAL, Endpoints: []*networking.WorkloadEntry{{Address: addr}}}
	}
	old := entryObj("old", 5, spec("echo.demo.svc.cluster.local", "10.9.0.1"))
	young := entryObj("young", 1, spec("ECHO.demo.svc.cluster.local", "10.9.0.2"))
	other := entryObj("other", 1, spec("other.ext.test", "10.9.0.3"))
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{young, old, other})
	if got := s.EntryHosts(); !reflect.DeepEqual(got, []model.Hostname{"echo.demo.svc.cluster.local", "other.ext.test"}) {
		t.Errorf("hosts %v", got)
	}
	if e := s.Entry("echo.demo.svc.cluster.local"); e.Endpoints[0].Address != netip.MustParseAddr("10.9.0.1") {
		t.Errorf("winner %+v, want the oldest entry's", e)
	}
	if sh := s.Shadowed(); len(sh) != 1 || sh[0].Lost != young.Key || sh[0].By != old.Key {
		t.Errorf("shadowed %+v", sh)
	}

	k8s := &model.MergedService{
		Service: &model.Service{Hostname: "echo.demo.svc.cluster.local", Name: "echo", Namespace: "demo",
			Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}},
		Endpoints: []model.Endpoint{{Cluster: "c1", Address: netip.MustParseAddr("10.1.0.1"), Ready: true}},
		Clusters:  []model.ClusterID{"c1"},
	}
	m := istioconfig.MergeEntry(k8s, s.Entry("echo.demo.svc.cluster.local"))
	if m.Service.Name != "echo" || len(m.Service.Ports) != 2 || m.Service.Ports[0].Port != 8080 || m.Service.Ports[1].Port != 9000 {
		t.Errorf("merged service %+v", m.Service)
	}
	if len(m.Endpoints) != 2 || m.Endpoints[0].Cluster != "" || m.Endpoints[1].Cluster != "c1" || !reflect.DeepEqual(m.Clusters, k8s.Clusters) {
		t.Errorf("merged endpoints %+v", m.Endpoints)
	}
	if len(k8s.Service.Ports) != 1 || len(k8s.Endpoints) != 1 {
		t.Error("MergeEntry modified the registry's service")
	}
	if istioconfig.MergeEntry(k8s, nil) != k8s || istioconfig.MergeEntry(nil, s.Entry("other.ext.test")) != s.Entry("other.ext.test") {
		t.Error("a merge with nothing is not the identity")
	}

	next := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{young, other,
		entryObj("new", 0, spec("new.ext.test", "10.9.0.4"))})
	if got := istioconfig.EntriesChanged(s, next); !reflect.DeepEqual(got, []model.Hostname{"echo.demo.svc.cluster.local", "new.ext.test"}) {
		t.Errorf("changed %v", got)
	}
	if got := istioconfig.EntriesChanged(nil, s); len(got) != 2 {
		t.Errorf("changed from nothing %v", got)
	}
}
