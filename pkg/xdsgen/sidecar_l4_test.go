package xdsgen

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

func chainProxy(t *testing.T, fc *listenerv3.FilterChain) *tcpproxyv3.TcpProxy {
	t.Helper()
	return unpackAny(t, fc.GetFilters()[0].GetTypedConfig()).(*tcpproxyv3.TcpProxy)
}

// TestSidecarL4Routes: a VirtualService's tcp[] rule moves a sidecar's TCP
// port to its weighted destinations (the first rule taking the port; one
// for another port or another gateway does not), its tls[] rules add SNI
// chains before the service's own; a match on the client is left out.
// Without the VirtualService the port forwards to the service.
func TestSidecarL4Routes(t *testing.T) {
	db := svcOn("db", "demo", 5432, model.ProtocolTCP)
	secure := svcOn("secure", "demo", 443, model.ProtocolTCP)
	services := []*model.MergedService{db, secure, svcOn("db-v2", "demo", 5433, model.ProtocolTCP)}
	cfg := gatewayConfig(t,
		gwObj{validate.KindVirtualService, "demo", "db", 1, `{"hosts":["db"],"tcp":[
			{"match":[{"port":9999}],"route":[{"destination":{"host":"nowhere"}}]},
			{"match":[{"gateways":["ingress/gw"]}],"route":[{"destination":{"host":"nowhere"}}]},
			{"match":[{"sourceLabels":{"app":"x"}}],"route":[{"destination":{"host":"nowhere"}}]},
			{"match":[{"port":5432}],"route":[{"destination":{"host":"db"},"weight":80},{"destination":{"host":"db-v2","port":{"number":5433}},"weight":20}]}]}`},
		gwObj{validate.KindVirtualService, "demo", "secure", 1, `{"hosts":["secure"],"tls":[
			{"match":[{"sniHosts":["a.secure.example"]}],"route":[{"destination":{"host":"db-v2","port":{"number":5433}}}]}]}`},
	)
	sc := Sidecar{IP: netip.MustParseAddr("10.0.0.9"), Namespace: "demo", Interception: InterceptRedirect}
	ls := SidecarListenersWith(services, cfg, sc, Options{})
	for _, l := range ls {
		checkValid(t, "listener "+l.GetName(), l)
	}
	dbl := listenerNamed(t, ls, "0.0.0.0_5432")
	w := chainProxy(t, dbl.GetFilterChains()[0]).GetWeightedClusters().GetClusters()
	if len(w) != 2 || w[0].GetName() != "outbound|5432||db.demo.svc.cluster.local" || w[0].GetWeight() != 80 ||
		w[1].GetName() != "outbound|5433||db-v2.demo.svc.cluster.local" {
		t.Errorf("5432 forwards to %v", w)
	}
	tls := listenerNamed(t, ls, "0.0.0.0_443")
	chains := tls.GetFilterChains()
	if len(tls.GetListenerFilters()) != 1 || len(chains) != 2 ||
		strings.Join(chains[0].GetFilterChainMatch().GetServerNames(), ",") != "a.secure.example" ||
		chainProxy(t, chains[0]).GetCluster() != "outbound|5433||db-v2.demo.svc.cluster.local" ||
		chainProxy(t, chains[1]).GetCluster() != "outbound|443||secure.demo.svc.cluster.local" {
		t.Errorf("443 chains %v", chains)
	}
	// Without the VirtualServices: the services' own clusters.
	for _, l := range SidecarListeners(services, sc, Options{}) {
		if len(l.GetFilterChains()) != 1 && slices.Contains([]string{"0.0.0.0_5432", "0.0.0.0_443"}, l.GetName()) {
			t.Errorf("%s without a VirtualService has %d chains", l.GetName(), len(l.GetFilterChains()))
		}
	}

	// A tcp[] change replans the sidecars' listeners.
	p := NewSidecarPlanner(Options{})
	n, built := BuildSidecar(SidecarNode{Proxy: sc, Cluster: "cluster-1"}, services, nil, Options{})
	p.Adopt("s", n, built, services, nil, false)
	var updates []ServiceUpdate
	for _, ms := range services {
		updates = append(updates, ServiceUpdate{Hostname: ms.Service.Hostname, Service: ms})
	}
	p.Plan(updates, services, nil, false)
	plan := p.Plan(updates[:1], services, cfg, false)
	if ch := plan.Nodes["s"][resourcev3.ListenerType]; ch.Upsert["0.0.0.0_5432"] == nil {
		t.Errorf("a VirtualService with tcp[] rules did not rewrite the listener: %v", plan.Nodes)
	}
}
