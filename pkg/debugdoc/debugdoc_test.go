package debugdoc

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestPaths(t *testing.T) {
	for got, want := range map[string]string{
		RegistryzPath: "/debug/registryz", FederationzPath: "/debug/federationz", TrustzPath: "/debug/trustz",
		SpokezPath: "/debug/spokez", ProxyStatusPath: "/debug/proxystatusz",
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}
}

// TestRegistryzWire pins the JSON names readers rely on.
func TestRegistryzWire(t *testing.T) {
	const doc = `{"replica":"hub-0",
 "clusters":[{"id":"cluster-1","secret":"istio-system/remote-a","state":"synced","error":"","generation":3,
   "credentialExpiry":"2026-01-02T03:04:05Z","services":1,"endpoints":2}],
 "secretErrors":[{"secret":"istio-system/bad","error":"no clusters"}],
 "services":[{"hostname":"echo.demo.svc.cluster.local","ports":[{"name":"grpc","port":8080,"protocol":"GRPC"}],
   "endpoints":[{"cluster":"cluster-1","address":"10.0.0.1","locality":{"region":"r1","zone":"z1"},"ready":true,
     "serviceAccount":"echo","pod":"echo-0","ports":{"grpc":18080}},
    {"cluster":"cluster-2","address":"10.0.0.2","locality":{},"ready":true,"ports":{}},
    {"cluster":"cluster-1","address":"10.0.0.3","locality":{},"ready":false,"ports":{}}]}]}`
	var rz Registryz
	if err := json.Unmarshal([]byte(doc), &rz); err != nil {
		t.Fatal(err)
	}
	c, ok := rz.Cluster("cluster-1")
	want := RegistryzCluster{ID: "cluster-1", Secret: "istio-system/remote-a", State: ClusterSynced, Generation: 3,
		CredentialExpiry: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Services: 1, Endpoints: 2}
	if !ok || !reflect.DeepEqual(c, want) {
		t.Errorf("Cluster(cluster-1) = %+v, %v; want %+v", c, ok, want)
	}
	if _, ok := rz.Cluster("nope"); ok {
		t.Errorf("Cluster(nope) found")
	}
	if rz.Replica != "hub-0" || len(rz.SecretErrors) != 1 || rz.SecretErrors[0] != (SecretError{"istio-system/bad", "no clusters"}) {
		t.Errorf("replica %q, secret errors %+v", rz.Replica, rz.SecretErrors)
	}
	s, ok := rz.Service("echo.demo.svc.cluster.local")
	if !ok || len(s.Ports) != 1 || s.Ports[0] != (model.ServicePort{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}) {
		t.Fatalf("Service = %+v, %v", s, ok)
	}
	if got := s.ReadyEndpoints("cluster-1"); len(got) != 1 || got[0].Address != netip.MustParseAddr("10.0.0.1") || got[0].Pod != "echo-0" {
		t.Errorf("ReadyEndpoints(cluster-1) = %+v", got)
	}
	if got := s.ReadyEndpoints(""); len(got) != 2 {
		t.Errorf("ReadyEndpoints(all) = %+v", got)
	}
	if _, ok := rz.Service("other.demo.svc.cluster.local"); ok {
		t.Errorf("Service(other) found")
	}
	out, err := json.Marshal(rz)
	if err != nil {
		t.Fatal(err)
	}
	var again Registryz
	if err := json.Unmarshal(out, &again); err != nil || !reflect.DeepEqual(again, rz) {
		t.Errorf("round trip: %+v, %v", again, err)
	}
}

func TestFederationzWire(t *testing.T) {
	const doc = `{"self":"hub-0","watchReplicas":2,
 "members":[{"id":"hub-0","gossipAddr":"127.0.0.1:1","peerAddr":"127.0.0.1:2","connected":true}],
 "clusters":[{"id":"cluster-1","owners":["hub-0","hub-1"],"version":{"term":4,"seq":9,"owner":"hub-0"}}],
 "suspects":["hub-2"]}`
	var fz Federationz
	if err := json.Unmarshal([]byte(doc), &fz); err != nil {
		t.Fatal(err)
	}
	want := Federationz{Self: "hub-0", WatchReplicas: 2,
		Members:  []FederationzMember{{ID: "hub-0", GossipAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2", Connected: true}},
		Clusters: []FederationzCluster{{ID: "cluster-1", Owners: []string{"hub-0", "hub-1"}, Version: StateVersion{Term: 4, Seq: 9, Owner: "hub-0"}}},
		Suspects: []string{"hub-2"},
	}
	if !reflect.DeepEqual(fz, want) {
		t.Errorf("federationz %+v, want %+v", fz, want)
	}
	if got := fz.Owners("cluster-1"); !reflect.DeepEqual(got, []string{"hub-0", "hub-1"}) || fz.Owners("x") != nil {
		t.Errorf("Owners = %v, %v", got, fz.Owners("x"))
	}
}

func TestTrustzWire(t *testing.T) {
	const doc = `{"roots":[{"trustDomain":"cluster.local","fingerprint":"ab12","source":"hub-0",
 "notAfter":"2030-01-01T00:00:00Z","retireAt":"2027-01-01T00:00:00Z","pem":"-----BEGIN CERTIFICATE-----\n"}]}`
	var tz Trustz
	if err := json.Unmarshal([]byte(doc), &tz); err != nil {
		t.Fatal(err)
	}
	want := TrustzRoot{TrustDomain: "cluster.local", Fingerprint: "ab12", Source: "hub-0",
		NotAfter: "2030-01-01T00:00:00Z", RetireAt: "2027-01-01T00:00:00Z", PEM: "-----BEGIN CERTIFICATE-----\n"}
	if len(tz.Roots) != 1 || tz.Roots[0] != want {
		t.Errorf("roots %+v, want %+v", tz.Roots, want)
	}
	if !tz.Has("ab12") || tz.Has("cd34") {
		t.Errorf("Has: %v %v", tz.Has("ab12"), tz.Has("cd34"))
	}
	tz.Roots[0].RetireAt = ""
	out, _ := json.Marshal(tz)
	if strings.Contains(string(out), "retireAt") {
		t.Errorf("empty retireAt written: %s", out)
	}
}

func TestSpokezWire(t *testing.T) {
	const doc = `[{"cluster":"cluster-1","version":"v1","identity":"system:serviceaccount:istio-system:shim",
 "connectedAt":"2026-01-01T00:00:00Z","lastSeen":"2026-01-01T00:01:00Z","healthy":true,"streams":2,
 "bundleVersion":"7","hubs":["hub-0","hub-1"]}]`
	var sz Spokez
	if err := json.Unmarshal([]byte(doc), &sz); err != nil {
		t.Fatal(err)
	}
	sp, ok := sz.Spoke("cluster-1")
	want := Spoke{Cluster: "cluster-1", Version: "v1", Identity: "system:serviceaccount:istio-system:shim",
		ConnectedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), LastSeen: time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC),
		Healthy: true, Streams: 2, BundleVersion: "7", Hubs: []string{"hub-0", "hub-1"}}
	if !ok || !reflect.DeepEqual(sp, want) {
		t.Errorf("Spoke(cluster-1) = %+v, %v; want %+v", sp, ok, want)
	}
	if _, ok := sz.Spoke("cluster-2"); ok {
		t.Errorf("Spoke(cluster-2) found")
	}
}

// TestServicesDigest: the digest ignores the order services and endpoints
// were built in, and changes with any endpoint's content.
func TestServicesDigest(t *testing.T) {
	ep := func(cluster, addr string) model.Endpoint {
		return model.Endpoint{Cluster: model.ClusterID(cluster), Address: netip.MustParseAddr(addr), Ready: true, Ports: map[string]uint32{"grpc": 8080}}
	}
	a := []RegistryzService{
		{Hostname: "a.demo.svc.cluster.local", Endpoints: []model.Endpoint{ep("c1", "10.0.0.1"), ep("c2", "10.0.0.2")}},
		{Hostname: "b.demo.svc.cluster.local", Endpoints: []model.Endpoint{ep("c1", "10.0.0.3")}},
	}
	b := []RegistryzService{
		{Hostname: "b.demo.svc.cluster.local", Endpoints: []model.Endpoint{ep("c1", "10.0.0.3")}},
		{Hostname: "a.demo.svc.cluster.local", Endpoints: []model.Endpoint{ep("c2", "10.0.0.2"), ep("c1", "10.0.0.1")}},
	}
	if ServicesDigest(a) != ServicesDigest(b) {
		t.Error("the same registry in another order has another digest")
	}
	if a[0].Endpoints[0].Cluster != "c1" || b[1].Endpoints[0].Cluster != "c2" {
		t.Error("the digest reordered its input")
	}
	c := slices.Clone(b)
	c[0].Endpoints = []model.Endpoint{ep("c1", "10.0.0.3")}
	c[0].Endpoints[0].Ready = false
	if ServicesDigest(c) == ServicesDigest(b) {
		t.Error("an endpoint turned not ready, the digest stayed")
	}
	if len(ServicesDigest(nil)) != 32 {
		t.Errorf("digest %q is not 16 bytes of hex", ServicesDigest(nil))
	}
}
