//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// eastWestGateway is the Istio Gateway of every network's east-west
// gateway, as Istio's multi-network guide applies it.
const eastWestGateway = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
`

// eastWestGatewayAPI is network-1's east-west gateway declared the
// Gateway API's way (Istio's east-west variant): a Gateway labelled with
// its network whose TLS Passthrough listener is on 15443.
const eastWestGatewayAPI = gatewayClassIstio + `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: eastwest-api
  namespace: istio-system
  labels: {topology.istio.io/network: network-1}
spec:
  gatewayClassName: istio
  listeners:
  - name: cross-network
    port: 15443
    protocol: TLS
    tls: {mode: Passthrough}
`

// multiNetwork is a fleet whose clusters are each on a network (a pod
// network segment) of their own.
type multiNetwork struct {
	f        *framework.Fleet
	net      *framework.PodNetwork
	segments map[model.ClusterID]*framework.Segment
}

// networkOf is cluster-N's network, network-N.
func networkOf(r *framework.RemoteCluster) string {
	return "network-" + strings.TrimPrefix(string(r.ID), "cluster-")
}

// labelSystemNamespace says r's network on its istio-system namespace,
// as Istio's multi-network install does.
func labelSystemNamespace(t *testing.T, r *framework.RemoteCluster) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system",
		Labels: map[string]string{model.LabelTopologyNetwork: networkOf(r)}}}
	if err := r.Client().Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
}

// startEastWestGateway starts r's east-west gateway: a router Pod (real
// pilot-agent `proxy router` and Envoy, ISTIO_META_NETWORK set) on r's
// segment with a second leg on the bridge, which every segment reaches,
// and its Service labelled with r's network, port 15443, whose load
// balancer address is that leg's. It returns the gateway and its public
// address.
//
// selector are the gateway Pod's labels that its Gateway selects.
func (m *multiNetwork) startEastWestGateway(t *testing.T, hub *framework.Hub, r *framework.RemoteCluster, selector map[string]string) (*framework.Sidecar, netip.Addr) {
	t.Helper()
	ctx := t.Context()
	name := "ew-" + strings.TrimPrefix(string(r.ID), "cluster-")
	pod := framework.NewTestPod(t, m.net, framework.PodOptions{Name: name, Segment: m.segments[r.ID]})
	public, err := pod.AddLeg(ctx)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{model.LabelTopologyNetwork: networkOf(r)}
	for k, v := range selector {
		labels[k] = v
	}
	gw := framework.StartTestSidecar(t, m.f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: name, Namespace: "istio-system", ServiceAccount: "eastwestgateway",
		Labels: labels, Gateway: true,
		Network:     networkOf(r),
		ProxyConfig: map[string]any{"proxyStatsMatcher": map[string]any{"inclusionPrefixes": []string{"listener.0.0.0.0_15443."}}},
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: "istio-system",
			Labels: map[string]string{"istio": "eastwestgateway", model.LabelTopologyNetwork: networkOf(r)}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: selector,
			Ports: []corev1.ServicePort{{Name: "tls", Port: model.DefaultGatewayPort, TargetPort: intstr.FromInt32(model.DefaultGatewayPort),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := r.Client().Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	// envtest runs no load balancer controller: the test is one.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: public.String()}}
	if err := r.Client().Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	return gw, public
}

// echoOn runs r's echo.demo:8080 (an HTTP echo behind a sidecar answering
// "<cluster>/echo-0") in a Pod on r's segment.
func (m *multiNetwork) echoOn(t *testing.T, hub *framework.Hub, r *framework.RemoteCluster) (*framework.Workload, *framework.Sidecar) {
	t.Helper()
	ctx := t.Context()
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := framework.NewTestPod(t, m.net, framework.PodOptions{Name: string(r.ID) + "-echo", Segment: m.segments[r.ID]})
	app, err := framework.StartHTTPEcho(ctx, pod, fmt.Sprintf("127.0.0.1:%d", w.TargetPort()), string(r.ID)+"/echo-0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	return w, framework.StartTestSidecar(t, m.f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: "echo-0", Namespace: "demo", Workload: w,
	})
}

// clientOn runs a client sidecar (no app: the test calls through its
// Envoy) in a Pod on r's segment. Its proxy says no network: the hub
// takes its cluster's.
func (m *multiNetwork) clientOn(t *testing.T, hub *framework.Hub, r *framework.RemoteCluster) (*framework.Sidecar, *framework.Pod) {
	t.Helper()
	pod := framework.NewTestPod(t, m.net, framework.PodOptions{Name: string(r.ID) + "-client", Segment: m.segments[r.ID]})
	return framework.StartTestSidecar(t, m.f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: "client-" + strings.TrimPrefix(string(r.ID), "cluster-"), Namespace: "demo", ServiceAccount: "client",
	}), pod
}

// gatewayConnections is Envoy's count of connections accepted by the
// east-west listener of gw.
func gatewayConnections(ctx context.Context, gw *framework.Sidecar) (int, error) {
	return envoyCounter(ctx, gw, "listener.0.0.0.0_15443.downstream_cx_total")
}

// answeredBy checks that n calls from client through its Envoy are all
// answered, by cluster want only.
func answeredBy(ctx context.Context, client *framework.Pod, n int, want string) func() error {
	return func() error {
		by, _, err := callsFrom(ctx, client, n)
		if err != nil {
			return err
		}
		if by[want] != n {
			return fmt.Errorf("answers by cluster %v, want all %d by %s", by, n, want)
		}
		return nil
	}
}

// TestMultiNetwork is issue #30's "Must show": cluster-1 on network-1 and
// cluster-2 on network-2, each a segment of its own with no route between
// them (a cluster-1 Pod cannot connect to a cluster-2 Pod), served by two
// hub replicas, the clients' replica not watching cluster-2. A client
// sidecar in cluster-1 calls echo: locally while cluster-1 has a ready
// endpoint; through cluster-2's east-west gateway (real pilot-agent router
// and Envoy, AUTO_PASSTHROUGH on 15443) when it has none, the gateway
// counting the connections and the server seeing the client's SPIFFE ID
// (TLS passed through, not terminated), explain naming the gateway with
// its weight; and back. cluster-1's east-west gateway, declared as a
// Gateway API Gateway, carries the opposite direction. /debug/registryz shows each cluster's network and
// each network's gateway.
func TestMultiNetwork(t *testing.T) {
	net := framework.NewTestPodNetwork(t)
	ctx := t.Context()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	m := &multiNetwork{f: f, net: net, segments: map[model.ClusterID]*framework.Segment{}}
	for _, r := range f.Remotes() {
		labelSystemNamespace(t, r)
		s, err := net.AddSegment(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.segments[r.ID] = s
	}
	r1, r2 := f.Remote("cluster-1"), f.Remote("cluster-2")
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().InstallIstioCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	h0 := framework.StartTestHub(t, f, framework.HubOptions{ListenHost: net.Gateway().String(), GossipKeyFile: key, Args: []string{"--xds-mtls"}})
	h1 := framework.StartTestHub(t, f, framework.HubOptions{ListenHost: net.Gateway().String(), GossipKeyFile: key, Args: []string{"--xds-mtls"},
		Join: []*framework.Hub{h0}})

	// The clients' replica is one that does not watch cluster-2: its
	// state of cluster-2, the gateway's included, is replicated.
	var hub, other *framework.Hub
	testutil.Eventually(t, converge, poll, func() error {
		fz, err := h0.Federationz(ctx)
		if err != nil {
			return err
		}
		owners := fz.Owners(r2.ID)
		if len(owners) != 1 || len(fz.Owners(r1.ID)) != 1 {
			return fmt.Errorf("owners of cluster-2 %v, of cluster-1 %v", owners, fz.Owners(r1.ID))
		}
		hub, other = h0, h1
		if owners[0] == h0.ReplicaID() {
			hub, other = h1, h0
		}
		return nil
	})
	t.Logf("clients' replica %s; cluster-2 is watched by %s", hub.ReplicaID(), other.ReplicaID())
	if err := f.Config().ApplyIstio(ctx, eastWestGateway); err != nil {
		t.Fatal(err)
	}

	w1, echo1 := m.echoOn(t, hub, r1)
	w2, echo2 := m.echoOn(t, other, r2)
	gw2, public2 := m.startEastWestGateway(t, other, r2, map[string]string{"istio": "eastwestgateway"})
	cl, clientPod := m.clientOn(t, hub, r1)
	waitReady(t, echo1, echo2, gw2, cl)

	// The networks cannot reach each other: no route from cluster-1's
	// Pods to cluster-2's.
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	direct := fmt.Sprintf("%s:%d", echo2.IP(), w2.TargetPort())
	if c, err := clientPod.Dial(dctx, "tcp", direct); err == nil {
		_ = c.Close()
		t.Fatalf("a cluster-1 Pod reached the cluster-2 Pod at %s directly", direct)
	} else {
		t.Logf("direct connection to %s: %v (as it should)", direct, err)
	}
	cancel()

	// Both replicas show each cluster's network and network-2's gateway.
	for _, h := range []*framework.Hub{hub, other} {
		testutil.Eventually(t, converge, poll, func() error {
			rz, err := h.Registryz(ctx)
			if err != nil {
				return err
			}
			for _, c := range rz.Clusters {
				if want := model.Network("network-" + strings.TrimPrefix(string(c.ID), "cluster-")); c.Network != want {
					return fmt.Errorf("%s: cluster %s on network %q, want %q", h.ReplicaID(), c.ID, c.Network, want)
				}
			}
			gws := rz.Networks.Of("network-2")
			if len(gws) != 1 || gws[0].Address != public2 || gws[0].Port != model.DefaultGatewayPort {
				return fmt.Errorf("%s: network-2's gateways %+v, want %s:15443", h.ReplicaID(), gws, public2)
			}
			return nil
		})
	}

	if out, err := framework.Meshfedctl(t, "remote-clusters", "--monitoring", hub.MonitoringURL()); err != nil ||
		!strings.Contains(out, fmt.Sprintf("network-2: %s:15443 (cluster-2 istio-eastwestgateway.istio-system.svc.cluster.local)", public2)) {
		t.Errorf("meshfedctl remote-clusters does not show network-2's gateway (%v):\n%s", err, out)
	}

	// cluster-1 has a ready endpoint: every call stays there.
	testutil.Eventually(t, converge, poll, answeredBy(ctx, clientPod, 10, "cluster-1"))
	before, err := gatewayConnections(ctx, gw2)
	if err != nil {
		t.Fatal(err)
	}

	// None ready in cluster-1: the calls cross to network-2 through its
	// gateway, which passes the client's TLS through to the server's
	// sidecar.
	if err := w1.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, answeredBy(ctx, clientPod, 10, "cluster-2"))
	_, reply, err := callsFrom(ctx, clientPod, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "URI=" + cl.SPIFFEID(); !strings.Contains(reply.XFCC, want) {
		t.Errorf("x-forwarded-client-cert %q does not name the client (%s): TLS was not passed through", reply.XFCC, want)
	}
	after, err := gatewayConnections(ctx, gw2)
	if err != nil {
		t.Fatal(err)
	}
	// (The client's Envoy keeps its upstream connections: one may carry
	// every call.)
	if after <= before {
		t.Errorf("cluster-2's gateway accepted no connection (%d before, %d after) while the calls went through it", before, after)
	}

	// explain names the gateway the client is sent in echo's place, with
	// the weight of the one endpoint behind it.
	var x debugdoc.Explainz
	var out string
	testutil.Eventually(t, converge, poll, func() error {
		var err error
		out, err = framework.Meshfedctl(t, "explain", "--monitoring", hub.MonitoringURL(), "-o", "json",
			cl.NodeID(), fmt.Sprintf("echo.demo:%d", echoPortHTTP))
		if err != nil {
			ps, _ := hubCtl(t, hub, "proxy-status")
			return fmt.Errorf("%w; proxy-status:\n%s", err, ps)
		}
		return json.Unmarshal([]byte(out), &x)
	})
	gwAddr := netip.AddrPortFrom(public2, model.DefaultGatewayPort).String()
	if x.Network != "network-1" || !slices.ContainsFunc(x.Endpoints, func(e debugdoc.ExplainedEndpoint) bool {
		return e.Gateway && e.Sent && e.Address == gwAddr && e.Weight == 1 && e.Network == "network-2"
	}) {
		t.Errorf("explain does not show network-2's gateway %s sent with weight 1: %s", gwAddr, out)
	}

	// Ready again in cluster-1: back home.
	if err := w1.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, answeredBy(ctx, clientPod, 10, "cluster-1"))

	// The opposite direction: a client in cluster-2, whose echo is not
	// ready, reaches cluster-1 through cluster-1's gateway, declared
	// through the Gateway API this time.
	if err := f.Config().InstallGatewayAPICRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().ApplyIstio(ctx, eastWestGatewayAPI); err != nil {
		t.Fatal(err)
	}
	gw1, _ := m.startEastWestGateway(t, hub, r1, map[string]string{"gateway.networking.k8s.io/gateway-name": "eastwest-api"})
	cl2, client2Pod := m.clientOn(t, hub, r2)
	waitReady(t, gw1, cl2)
	if err := w2.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, answeredBy(ctx, client2Pod, 10, "cluster-1"))
	if n, err := gatewayConnections(ctx, gw1); err != nil || n == 0 {
		t.Errorf("cluster-1's gateway accepted %d connections (%v)", n, err)
	}
	// (A gateway with only an AUTO_PASSTHROUGH server asks for no routes:
	// allSynced's four types are the sidecars'.)
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, cl, cl2, echo1) })
}
