package xds

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

func serviceEntry(name string, spec *networking.ServiceEntry) *istioconfig.ServiceEntry {
	return &istioconfig.ServiceEntry{Meta: meta("ServiceEntry", name), Spec: spec}
}

// TestServiceEntriesPlanned: a config push makes services of the
// ServiceEntries — an external host of its own (clusters and its load
// assignment) and a MESH_INTERNAL entry's endpoint joining the registry's
// echo Service — in host order among the registry's; removing the entries
// withdraws the one and shrinks the other, and the Envoy sidecar's
// clusters follow.
func TestServiceEntriesPlanned(t *testing.T) {
	st, c, node, _ := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil, nil)
	grpcPort := []*networking.ServicePort{{Number: 8080, Name: "grpc", Protocol: "GRPC"}}
	cfg := configOf(
		serviceEntry("ext", &networking.ServiceEntry{Hosts: []string{"api.ext.test"}, Ports: grpcPort,
			Resolution: networking.ServiceEntry_STATIC, Endpoints: []*networking.WorkloadEntry{{Address: "10.9.0.1"}}}),
		serviceEntry("dns", &networking.ServiceEntry{Hosts: []string{"a.dns.test"}, Ports: grpcPort,
			Resolution: networking.ServiceEntry_DNS, Endpoints: []*networking.WorkloadEntry{{Address: "db.dns.test"}}}),
		serviceEntry("vm", &networking.ServiceEntry{Hosts: []string{string(echo)}, Ports: grpcPort, Location: networking.ServiceEntry_MESH_INTERNAL,
			Resolution: networking.ServiceEntry_STATIC, Endpoints: []*networking.WorkloadEntry{{Address: "10.9.0.2", Locality: "r1"}}}),
	)
	written := func(ws []write) map[string]bool {
		out := map[string]bool{}
		for _, w := range ws {
			for n := range w.Upsert {
				out[w.typeURL+" "+n] = true
			}
			for _, n := range w.Delete {
				out[w.typeURL+" -"+n] = true
			}
		}
		return out
	}
	apply := func(ws []write) {
		for _, w := range ws {
			if err := w.cache.UpdateResources(w.Upsert, w.Delete); err != nil {
				t.Fatal(err)
			}
		}
	}
	ws := c.plan(nil, st.Service, cfg, nil)
	got := written(ws)
	for _, want := range []string{
		resourcev3.ClusterType + " outbound|8080||api.ext.test",
		resourcev3.ListenerType + " api.ext.test:8080",
		resourcev3.ClusterType + " outbound|8080||a.dns.test",
		resourcev3.ListenerType + " a.dns.test:8080",
	} {
		if !got[want] {
			t.Errorf("no %s in %v", want, got)
		}
	}
	apply(ws)
	c.pushMu.Lock()
	var hosts []model.Hostname
	for _, ms := range c.meshServicesLocked() {
		hosts = append(hosts, ms.Service.Hostname)
	}
	c.pushMu.Unlock()
	if want := []model.Hostname{"a.dns.test", "api.ext.test", echo}; !slices.Equal(hosts, want) {
		t.Errorf("mesh services %v, want %v", hosts, want)
	}
	// Proxies of cluster c1 in region r1 see the Pod and the VM of echo,
	// both local (the VM is in their region).
	lc := c.group(xdsgen.ProxyGroup{Cluster: "c1", Region: "r1"})
	cla, _ := lc.GetResources()[xdsgen.ClusterName(echo, 8080)].(*endpointv3.ClusterLoadAssignment)
	if n := countEndpoints(cla); n != 2 || len(cla.GetEndpoints()) != 1 {
		t.Errorf("echo's assignment %v, want the Pod and the VM in one priority", cla)
	}
	// The Envoy sidecar holds a DNS cluster of the DNS entry.
	dnsCluster, _ := c.envoy.Node(node.GetId()).Written(resourcev3.ClusterType)["outbound|8080||a.dns.test"].(*clusterv3.Cluster)
	if dnsCluster.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("sidecar's DNS entry cluster %v", dnsCluster)
	}

	ws = c.plan(nil, st.Service, configOf(), nil)
	got = written(ws)
	for _, want := range []string{
		resourcev3.ClusterType + " -outbound|8080||api.ext.test",
		resourcev3.ListenerType + " -api.ext.test:8080",
	} {
		if !got[want] {
			t.Errorf("no %s in %v", want, got)
		}
	}
	apply(ws)
	cla, _ = lc.GetResources()[xdsgen.ClusterName(echo, 8080)].(*endpointv3.ClusterLoadAssignment)
	if n := countEndpoints(cla); n != 1 {
		t.Errorf("echo's assignment after the entry left: %v", cla)
	}
}

func countEndpoints(cla *endpointv3.ClusterLoadAssignment) int {
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}

// TestSidecarSecretUnanswered: an Envoy sidecar that asks for an SDS
// secret over ADS (a DestinationRule's credentialName) gets no secret,
// and its stream lives on: its clusters are still served.
func TestSidecarSecretUnanswered(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	a := newADS(t, s.Addr().String(), "c1", "r1")
	a.node = envoyNode("10.1.0.7", "client", "c1", "REDIRECT")
	r := a.subscribe(resourcev3.SecretType, "kubernetes://cred")
	if len(r.GetResources()) != 0 {
		t.Fatalf("secrets %v, want none", r.GetResources())
	}
	if r := a.subscribe(resourcev3.ClusterType); len(r.GetResources()) == 0 {
		t.Fatal("no clusters after the secret request")
	}
}
