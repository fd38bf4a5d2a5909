package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// routerNode is the node of pilot-agent `proxy router` for pod <pod>.ingress
// at ip in cluster c1, labelled istio=ingressgateway.
func routerNode(ip, pod string) *corev3.Node {
	id := xdsnode.ID{Type: xdsnode.TypeRouter, IP: ip, Name: pod + ".ingress", Namespace: "ingress", DNSDomain: "ingress.svc.cluster.local"}
	return &corev3.Node{
		Id:            id.String(),
		UserAgentName: "envoy",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xdsnode.MetadataClusterID: structpb.NewStringValue("c1"),
			xdsnode.MetadataNamespace: structpb.NewStringValue("ingress"),
			xdsnode.MetadataLabels: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"istio": structpb.NewStringValue("ingressgateway"),
			}}),
		}},
	}
}

// TestRouterServed: a router node gets the listeners of the Gateways that
// select it and its routes from a cache of its own (http.<port>, which
// another gateway could name too), while a sidecar on the same hub keeps
// the shared routes; deleting the bound VirtualService empties the
// gateway's routes on its stream.
func TestRouterServed(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	gw := &istioconfig.Gateway{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "Gateway", Namespace: "ingress", Name: "public"}, Generation: 1},
		Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: []*networking.Server{{
			Port:  &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"},
			Hosts: []string{"*"},
		}}}}
	vs := &istioconfig.VirtualService{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: "ingress", Name: "echo"}, Generation: 1},
		Spec: &networking.VirtualService{Hosts: []string{"echo.example.com"}, Gateways: []string{"public"},
			Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: string(echo)}}}}}}}
	s.SetConfig(configOf(gw, vs))

	router := newADS(t, s.Addr().String(), "c1", "r1")
	router.node = routerNode("10.0.9.1", "gw-1")
	if got := resourceNames(t, router.subscribe(resourcev3.ListenerType)); !slices.Equal(got, []string{"0.0.0.0_80"}) {
		t.Errorf("router listeners %v", got)
	}
	r := router.subscribe(resourcev3.RouteType, "http.80")
	rc := unmarshalRoute(t, r)
	if len(rc.GetVirtualHosts()) != 1 || rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != "outbound|8080||"+string(echo) {
		t.Fatalf("http.80 %v", rc)
	}
	if got := resourceNames(t, router.subscribe(resourcev3.ClusterType)); !slices.Contains(got, "outbound|8080||"+string(echo)) {
		t.Errorf("router clusters %v", got)
	}

	sidecar := newADS(t, s.Addr().String(), "c1", "r1")
	sidecar.node = envoyNode("10.0.0.9", "client", "c1", "NONE")
	if got := resourceNames(t, sidecar.subscribe(resourcev3.RouteType, "8080")); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("sidecar routes %v", got)
	}

	s.SetConfig(configOf(gw))
	rc = unmarshalRoute(t, router.recvType(resourcev3.RouteType))
	if rc.GetName() != "http.80" || len(rc.GetVirtualHosts()) != 0 {
		t.Errorf("after the VirtualService's deletion http.80 is %v", rc)
	}
}

func unmarshalRoute(t *testing.T, r interface {
	GetResources() []*anypb.Any
}) *routev3.RouteConfiguration {
	t.Helper()
	if len(r.GetResources()) != 1 {
		t.Fatalf("%d route configurations, want 1", len(r.GetResources()))
	}
	rc := &routev3.RouteConfiguration{}
	if err := r.GetResources()[0].UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestGatewayWarnings: after a push, an Istio Gateway whose selector no
// Pod of the registry has is warned about, and the warning goes once a
// Pod with those labels is an endpoint; each change is signalled.
func TestGatewayWarnings(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	write := storeWriter(t, st)
	write(shard("c1", "r1", "10.0.0.5"))
	s := runServer(t, Options{Registry: st})
	gw := &istioconfig.Gateway{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "Gateway", Namespace: "ingress", Name: "public"}, Generation: 1},
		Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: []*networking.Server{{
			Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"},
		}}}}
	s.SetConfig(configOf(gw))
	waitutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		w := s.GatewayWarnings()[gw.Key]
		if len(w) != 1 || !strings.HasPrefix(w[0], "spec.selector: no Pod of the registry has the labels istio=ingressgateway") {
			return fmt.Errorf("warnings %q", w)
		}
		return nil
	})
	<-s.GatewayWarningsChanged() // signalled by the push
	sh := shard("c1", "r1", "10.0.0.5")
	sh[echo].Endpoints[0].Labels = model.NewLabels(map[string]string{"istio": "ingressgateway"})
	write(sh)
	waitutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if w := s.GatewayWarnings()[gw.Key]; len(w) != 0 {
			return fmt.Errorf("warnings %q with a Pod of the labels", w)
		}
		return nil
	})
}
