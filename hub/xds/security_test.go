package xds

import (
	"net/netip"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

func serveOpts(t *testing.T, opts Options) string {
	t.Helper()
	return runServer(t, opts).Addr().String()
}

// TestInboundListener: a subscription to an inbound listener name is
// answered with a server listener built from the name, with mTLS when the
// server's Security is on; other listeners stay untouched.
func TestInboundListener(t *testing.T) {
	for _, sec := range []bool{false, true} {
		st := store.New(store.Options{Self: "test"})
		if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
			t.Fatal(err)
		}
		addr := serveOpts(t, Options{Registry: st, Security: sec})
		a := newADS(t, addr, "c1", "r1")
		name := xdsgen.InboundListenerName(netip.MustParseAddrPort("10.1.0.1:9000"))
		r := a.subscribe(resourcev3.ListenerType, name, xdsgen.ListenerName(echo, 8080), xdsnode.InboundListenerPrefix+"bogus")
		got := map[string]*listenerv3.Listener{}
		for _, res := range r.GetResources() {
			var l listenerv3.Listener
			if err := res.UnmarshalTo(&l); err != nil {
				t.Fatal(err)
			}
			got[l.GetName()] = &l
		}
		if len(got) != 2 {
			t.Fatalf("security=%t: got listeners %v, want the inbound and the service listener", sec, got)
		}
		l := got[name]
		if l == nil {
			t.Fatalf("security=%t: inbound listener missing", sec)
		}
		if a := l.GetAddress().GetSocketAddress(); a.GetAddress() != "10.1.0.1" || a.GetPortValue() != 9000 {
			t.Errorf("inbound listener address %v", a)
		}
		if hasTLS := l.GetFilterChains()[0].GetTransportSocket() != nil; hasTLS != sec {
			t.Errorf("security=%t: inbound listener has TLS %t", sec, hasTLS)
		}
	}
}

// TestSecureClusters: with Security on, clusters carry mTLS whose SANs follow
// the endpoints' service accounts.
func TestSecureClusters(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	sh := shard("c1", "r1", "10.1.0.1")
	sh[echo].Endpoints[0].ServiceAccount = "echo-sa"
	gen := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", gen, sh); err != nil {
		t.Fatal(err)
	}
	addr := serveOpts(t, Options{Registry: st, Security: true, TrustDomain: "example.org"})
	a := newADS(t, addr, "c1", "r1")
	r := a.subscribe(resourcev3.ClusterType, xdsgen.ClusterName(echo, 8080))
	if got := clusterSANs(t, r.GetResources()[0]); len(got) != 1 || got[0] != "spiffe://example.org/ns/demo/sa/echo-sa" {
		t.Fatalf("SANs %v", got)
	}
	// A new service account among the endpoints updates the cluster.
	sh2 := shard("c1", "r1", "10.1.0.1", "10.1.0.2")
	sh2[echo].Endpoints[0].ServiceAccount = "echo-sa"
	sh2[echo].Endpoints[1].ServiceAccount = "other"
	if err := st.UpdateShard("c1", gen, echo, sh2[echo]); err != nil {
		t.Fatal(err)
	}
	for {
		r := a.recv()
		a.request(r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), xdsgen.ClusterName(echo, 8080))
		if r.GetTypeUrl() != resourcev3.ClusterType {
			continue
		}
		if got := clusterSANs(t, r.GetResources()[0]); len(got) != 2 {
			t.Fatalf("SANs after update %v", got)
		}
		return
	}
}

// clusterSANs returns the URI SANs that a cluster's UpstreamTlsContext
// accepts.
func clusterSANs(t *testing.T, res *anypb.Any) []string {
	t.Helper()
	var c clusterv3.Cluster
	if err := res.UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	var up tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatalf("cluster without TLS: %v", err)
	}
	var out []string
	for _, m := range up.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames() {
		out = append(out, m.GetMatcher().GetExact())
	}
	return out
}
