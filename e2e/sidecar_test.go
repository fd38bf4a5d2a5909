//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// sidecarFleet is a pod network, a fleet of n remote clusters (cluster-1 …
// cluster-n, each its own region) in one remote secret, and a hub with
// hubArgs listening on the network's gateway so that Pods reach it. The
// network is made first so that it is removed last, after the hub.
func sidecarFleet(t *testing.T, n int, hubArgs ...string) (*framework.Fleet, *framework.PodNetwork, *framework.Hub) {
	t.Helper()
	net := framework.NewTestPodNetwork(t)
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(n)})
	if err := f.Config().PutRemoteSecret(t.Context(), "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{ListenHost: net.Gateway().String(), Args: hubArgs})
	return f, net, hub
}

// proxyIDs lists the proxies (node IDs) in `meshfedctl proxy-status` of hub.
func proxyIDs(t *testing.T, hub *framework.Hub) ([]string, proxyJSON, error) {
	out, err := framework.Meshfedctl(t, "proxy-status", "--hub", hub.XDSAddr(), "-o", "json")
	if err != nil {
		return nil, proxyJSON{}, err
	}
	var doc proxyJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, doc, fmt.Errorf("decoding %q: %w", out, err)
	}
	var ids []string
	for _, p := range doc.Proxies {
		ids = append(ids, p.Proxy)
	}
	return ids, doc, nil
}

// TestSidecarHarness: one sidecar Pod, Istio's real pilot-agent driving
// real Envoy 1.40 in its own network namespace, with the environment the
// spoke's sidecar template renders. pilot-agent gets the Pod's workload
// certificate from the hub's CA with the Pod's projected token, and Envoy
// reaches the hub through pilot-agent's xDS proxy: the hub lists the node.
func TestSidecarHarness(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	r := f.Remotes()[0]
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", PortName: "http"})
	if err != nil {
		t.Fatal(err)
	}
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "echo-0"})
	sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: "echo-0", Namespace: "demo", Workload: w,
	})

	// Envoy is upstream 1.40, and its node is the Pod's.
	si, err := sc.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(si.Version, "/1.40.0/") {
		t.Errorf("Envoy version %q, want 1.40.0", si.Version)
	}
	wantID := "sidecar~" + pod.IP().String() + "~echo-0.demo~demo.svc.cluster.local"
	if sc.NodeID() != wantID || si.Node.ID != wantID {
		t.Errorf("node ID: framework %q, Envoy %q; want %q", sc.NodeID(), si.Node.ID, wantID)
	}

	// The workload certificate, from the hub's CA, as pilot-agent's SDS
	// serves it to Envoy.
	testutil.Eventually(t, converge, poll, func() error {
		cert, err := sc.WorkloadCertificate(ctx)
		if err != nil {
			return err
		}
		var uris []string
		for _, u := range cert.URIs {
			uris = append(uris, u.String())
		}
		if !slices.Equal(uris, []string{sc.SPIFFEID()}) {
			return fmt.Errorf("certificate SANs %v, want [%s]", uris, sc.SPIFFEID())
		}
		return nil
	})

	// Envoy's ADS stream reaches the hub through pilot-agent.
	testutil.Eventually(t, converge, poll, func() error {
		ids, _, err := proxyIDs(t, hub)
		if err != nil {
			return err
		}
		if !slices.Contains(ids, wantID) {
			return fmt.Errorf("proxy-status lists %v, not %s", ids, wantID)
		}
		return nil
	})
	_, doc, err := proxyIDs(t, hub)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Proxies {
		if p.Proxy == wantID {
			t.Logf("hub's proxy status of the sidecar: cluster %s, types %+v", p.Cluster, p.Types)
			if p.Cluster != string(r.ID) {
				t.Errorf("proxy-status cluster %q, want %q (ISTIO_META_CLUSTER_ID)", p.Cluster, r.ID)
			}
		}
	}
	// What Envoy took from the hub, for the record: the hub's Envoy
	// generator is tested by the scenarios; this harness only needs the
	// stream to work.
	cfg, err := sc.DynamicConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Envoy's dynamic config: listeners %v, clusters %v, routes %v", cfg.Listeners, cfg.Clusters, cfg.Routes)
}

// echoPortHTTP is the echo Service's port, where the client's Envoy
// listens (127.0.0.1:8080 inside the client Pod, INTERCEPTION_MODE NONE).
const echoPortHTTP = 8080

// setAppProtocol sets the appProtocol of w's Service port and EndpointSlice
// port (the framework's workloads say grpc).
func setAppProtocol(t *testing.T, w *framework.Workload, proto string) {
	t.Helper()
	ctx := t.Context()
	c := w.Cluster().Client()
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: w.Options().Namespace, Name: w.Options().Service}, svc); err != nil {
		t.Fatal(err)
	}
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].AppProtocol = &proto
	}
	if err := c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := w.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		for i := range es.Ports {
			es.Ports[i].AppProtocol = &proto
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// echoSidecars deploys, in every cluster of f, the HTTP service
// echo.demo:8080 with one sidecar Pod whose app (an HTTP echo answering
// "<cluster>/<pod>") listens on the Pod's loopback at the target port,
// behind the Pod's Envoy on the Pod's address.
func echoSidecars(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub) (map[model.ClusterID]*framework.Workload, map[model.ClusterID]*framework.Sidecar) {
	t.Helper()
	ctx := t.Context()
	workloads := map[model.ClusterID]*framework.Workload{}
	sidecars := map[model.ClusterID]*framework.Sidecar{}
	for _, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", ServicePort: echoPortHTTP, PortName: "http"})
		if err != nil {
			t.Fatal(err)
		}
		setAppProtocol(t, w, "http")
		workloads[r.ID] = w
		pod := framework.NewTestPod(t, net, framework.PodOptions{Name: string(r.ID) + "-echo"})
		app, err := framework.StartHTTPEcho(ctx, pod, fmt.Sprintf("127.0.0.1:%d", w.TargetPort()), string(r.ID)+"/echo-0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Close() })
		sidecars[r.ID] = framework.StartTestSidecar(t, f, framework.SidecarOptions{
			Cluster: r, Pod: pod, Hub: hub, Name: "echo-0", Namespace: "demo", Workload: w,
		})
	}
	return workloads, sidecars
}

// callsFrom sends n calls from the client Pod through its Envoy to
// echo.demo:8080 and counts the answers by cluster; the first failure is
// returned with the counts so far.
func callsFrom(ctx context.Context, client *framework.Pod, n int) (map[string]int, *framework.HTTPEchoReply, error) {
	by := map[string]int{}
	var last *framework.HTTPEchoReply
	host := fmt.Sprintf("%s:%d", echoHost, echoPortHTTP)
	for range n {
		reply, err := framework.GetHTTPEcho(ctx, client, fmt.Sprintf("127.0.0.1:%d", echoPortHTTP), host)
		if err != nil {
			return by, last, err
		}
		cluster, _, _ := strings.Cut(reply.Identity, "/")
		by[cluster]++
		last = reply
	}
	return by, last, nil
}

// TestSidecarLocalityFailover is the Envoy half of issue #11's "Must show":
// three clusters with an echo sidecar Pod each and a client sidecar Pod in
// cluster-1 calling echo.demo.svc.cluster.local:8080 through its own Envoy
// (HTTP/1.1). Answers come only from cluster-1 while it has ready
// endpoints, from cluster-2 and cluster-3 while it has none, and from
// cluster-1 again once they are back. The server sees the client's SPIFFE
// ID in x-forwarded-client-cert, and a plaintext call to a server's
// inbound port from outside the mesh gets no answer.
func TestSidecarLocalityFailover(t *testing.T) {
	f, net, hub := sidecarFleet(t, 3, "--xds-mtls")
	ctx := t.Context()
	workloads, sidecars := echoSidecars(t, f, net, hub)
	r1 := f.Remote("cluster-1")
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	cl := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, s := range append([]*framework.Sidecar{cl}, sidecars[r1.ID], sidecars["cluster-2"], sidecars["cluster-3"]) {
		if err := s.WaitReady(rctx); err != nil {
			t.Fatal(err)
		}
	}

	onlyFrom := func(want ...string) func() error {
		return func() error {
			by, _, err := callsFrom(ctx, clientPod, 20)
			if err != nil {
				return err
			}
			for c := range by {
				if !slices.Contains(want, c) {
					return fmt.Errorf("answers by cluster %v, want only %v", by, want)
				}
			}
			return nil
		}
	}

	// cluster-1 is the client's own: while it has ready endpoints, it
	// answers everything.
	testutil.Eventually(t, converge, poll, onlyFrom("cluster-1"))
	testutil.Consistently(t, time.Second, poll, onlyFrom("cluster-1"))

	// The server's Envoy saw the client's certificate.
	_, reply, err := callsFrom(ctx, clientPod, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "URI=" + cl.SPIFFEID(); !strings.Contains(reply.XFCC, want) {
		t.Errorf("x-forwarded-client-cert %q does not name the client (%s)", reply.XFCC, want)
	}

	// cluster-1's endpoints not ready: cluster-2 and cluster-3 answer.
	if err := workloads[r1.ID].SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		by, _, err := callsFrom(ctx, clientPod, 30)
		if err != nil {
			return err
		}
		if by["cluster-1"] != 0 || by["cluster-2"] == 0 || by["cluster-3"] == 0 {
			return fmt.Errorf("answers by cluster %v, want cluster-2 and cluster-3 only", by)
		}
		return nil
	})

	// Back: cluster-1 alone again.
	if err := workloads[r1.ID].SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, onlyFrom("cluster-1"))

	// Outside the mesh: a plaintext call from a Pod without a sidecar to
	// the server's inbound port gets no echo (mTLS is required there).
	outsider := framework.NewTestPod(t, net, framework.PodOptions{Name: "outsider"})
	inbound := fmt.Sprintf("%s:%d", sidecars["cluster-2"].IP(), workloads["cluster-2"].TargetPort())
	if reply, err := framework.GetHTTPEcho(ctx, outsider, inbound, string(echoHost)); err == nil {
		t.Errorf("plaintext call to the inbound port %s was answered: %+v", inbound, reply)
	}
}

// TestSidecarXDSOverTLS: pilot-agent with Istio's default control-plane
// settings (mutual TLS to the hub's CA port, verified as istiod's Service
// name) gets its workload certificate and its config over TLS.
func TestSidecarXDSOverTLS(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	r := f.Remotes()[0]
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "tls-0"})
	sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: "tls-0", Namespace: "demo",
		XDS: framework.SidecarXDSTLS, XDSTLSAddr: hub.CAAddr(),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := sc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		ids, _, err := proxyIDs(t, hub)
		if err != nil {
			return err
		}
		if !slices.Contains(ids, sc.NodeID()) {
			return fmt.Errorf("proxy-status lists %v, not %s", ids, sc.NodeID())
		}
		return nil
	})
}
