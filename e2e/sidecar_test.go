//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// waitReady waits up to two minutes for each sidecar's Envoy to be ready
// (pilot-agent's readiness: certificates and the first xDS answers).
func waitReady(t *testing.T, sidecars ...*framework.Sidecar) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, s := range sidecars {
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// proxyIDs lists the proxies (node IDs) in `meshfedctl proxy-status` of hub.
func proxyIDs(t *testing.T, hub *framework.Hub) ([]string, proxyJSON, error) {
	out, err := hubCtl(t, hub, "proxy-status", "-o", "json")
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
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: "demo", Service: "echo", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
		})
		if err != nil {
			t.Fatal(err)
		}
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
	waitReady(t, cl, sidecars[r1.ID], sidecars["cluster-2"], sidecars["cluster-3"])

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

	// What Envoy holds, as the hub and Envoy itself report it.
	servers := []*framework.Sidecar{sidecars[r1.ID], sidecars["cluster-2"], sidecars["cluster-3"]}
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, append(servers, cl)...) })
	checkEnvoyConfig(t, cl, workloads, sidecars)

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

// envoyTypes are the xDS types every Envoy sidecar subscribes to.
var envoyTypes = []string{"cds", "eds", "lds", "rds"}

// allSynced checks that `meshfedctl proxy-status` lists every one of scs
// with every type it subscribed to SYNCED and no NACK, the four Envoy types
// among them.
func allSynced(t *testing.T, hub *framework.Hub, scs ...*framework.Sidecar) error {
	_, doc, err := proxyIDs(t, hub)
	if err != nil {
		return err
	}
	for _, s := range scs {
		i := -1
		for j, p := range doc.Proxies {
			if p.Proxy == s.NodeID() {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("proxy-status lists no %s", s.NodeID())
		}
		types := doc.Proxies[i].Types
		for _, typ := range envoyTypes {
			if _, ok := types[typ]; !ok {
				return fmt.Errorf("%s has no %s in proxy-status: %+v", s.Name(), typ, types)
			}
		}
		for typ, st := range types {
			if st.Nack != "" {
				return fmt.Errorf("%s NACKed %s: %s", s.Name(), typ, st.Nack)
			}
			if st.Status != "SYNCED" {
				return fmt.Errorf("%s: %s is %s", s.Name(), typ, st.Status)
			}
		}
	}
	return nil
}

// checkEnvoyConfig reads the config of the Envoys of TestSidecarLocalityFailover
// from their admin interfaces: the client listens on 127.0.0.1:8080 for the
// echo service, each server on its Pod IP at the target port with an
// inbound cluster for it, and the client's echo cluster holds the servers
// of all three clusters, its own at priority 0 and the others after it.
func checkEnvoyConfig(t *testing.T, client *framework.Sidecar, workloads map[model.ClusterID]*framework.Workload,
	servers map[model.ClusterID]*framework.Sidecar) {
	t.Helper()
	ctx := t.Context()
	outbound := fmt.Sprintf("outbound|%d||%s", echoPortHTTP, echoHost)
	cfg, err := client.DynamicConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("127.0.0.1_%d", echoPortHTTP); !slices.Contains(cfg.Listeners, want) {
		t.Errorf("client's listeners %v lack %s", cfg.Listeners, want)
	}
	if !slices.Contains(cfg.Clusters, outbound) {
		t.Errorf("client's clusters %v lack %s", cfg.Clusters, outbound)
	}
	if len(cfg.WarmingClusters) > 0 {
		t.Errorf("client's clusters %v still warming", cfg.WarmingClusters)
	}
	for id, s := range servers {
		port := workloads[id].TargetPort()
		cfg, err := s.DynamicConfig(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s_%d", s.IP(), port); !slices.Contains(cfg.Listeners, want) {
			t.Errorf("%s server's listeners %v lack its inbound %s", id, cfg.Listeners, want)
		}
		if want := fmt.Sprintf("inbound|%d||", port); !slices.Contains(cfg.Clusters, want) {
			t.Errorf("%s server's clusters %v lack %s", id, cfg.Clusters, want)
		}
		if len(cfg.WarmingClusters) > 0 {
			t.Errorf("%s server's clusters %v still warming", id, cfg.WarmingClusters)
		}
	}

	testutil.Eventually(t, converge, poll, func() error {
		got, err := client.ClusterPriorities(ctx, outbound)
		if err != nil {
			return err
		}
		if len(got) != len(servers) {
			return fmt.Errorf("%s has hosts %v, want one per cluster", outbound, got)
		}
		for id, s := range servers {
			host := fmt.Sprintf("%s:%d", s.IP(), workloads[id].TargetPort())
			prio, ok := got[host]
			switch {
			case !ok:
				return fmt.Errorf("%s has no host %s of %s: %v", outbound, host, id, got)
			case id == client.Cluster().ID && prio != 0:
				return fmt.Errorf("own cluster's host %s has priority %d, want 0 (all: %v)", host, prio, got)
			case id != client.Cluster().ID && prio == 0:
				return fmt.Errorf("%s's host %s has priority 0, the client's own locality's (all: %v)", id, host, got)
			}
		}
		t.Logf("client's %s hosts by priority: %v", outbound, got)
		return nil
	})
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

// Service ports of TestSidecarProtocols, one per protocol: in NONE mode
// the client's outbound listener of a port is 127.0.0.1:<port>, which can
// carry only one protocol.
const (
	grpcEchoPort = 8080
	tcpEchoPort  = 9000
)

// serverSidecar deploys the service of opts (no replicas of its own) in r
// and one sidecar Pod serving it: start runs the Pod's app on the Pod's
// loopback at the target port, and Envoy keeps its TLS handshake stats.
func serverSidecar(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub, r *framework.RemoteCluster,
	opts framework.WorkloadOptions, start func(pod *framework.Pod, addr, identity string) (io.Closer, error)) (*framework.Workload, *framework.Sidecar) {
	t.Helper()
	w, err := r.DeployWorkload(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	name := opts.Service + "-0"
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: name})
	app, err := start(pod, fmt.Sprintf("127.0.0.1:%d", w.TargetPort()), string(r.ID)+"/"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: name, Namespace: opts.Namespace, Workload: w,
		ProxyConfig: map[string]any{"proxyStatsMatcher": handshakeStats},
	})
	return w, sc
}

// handshakeStats is the proxyStatsMatcher (Istio ProxyConfig) that makes
// Envoy keep its TLS handshake counters.
var handshakeStats = map[string]any{"inclusionSuffixes": []string{"ssl.handshake"}}

// closerFunc adapts EchoServer.Stop to io.Closer.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// TestSidecarProtocols: from a client sidecar Pod, a gRPC call (HTTP/2,
// appProtocol grpc) and a raw TCP echo (appProtocol tcp) flow through the
// client's Envoy to server Pods with sidecars, over mTLS; the servers'
// Envoys count the TLS handshakes. A proxyless grpc-go xDS client with a
// workload certificate of the hub's CA reaches the same gRPC server Pod,
// over mTLS straight to that Pod's Envoy, side by side with the Envoy
// client. Plaintext from outside the mesh gets no answer, and in the end
// every Envoy is SYNCED in proxy-status with no cluster left warming.
func TestSidecarProtocols(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1, "--xds-mtls")
	r := f.Remotes()[0]
	ctx := t.Context()

	var grpcApp *framework.EchoServer
	grpcW, grpcSC := serverSidecar(t, f, net, hub, r,
		framework.WorkloadOptions{Namespace: "demo", Service: "grpc-echo", ServicePort: grpcEchoPort},
		func(pod *framework.Pod, addr, id string) (io.Closer, error) {
			s, err := framework.StartGRPCEcho(ctx, pod, addr, id)
			if err != nil {
				return nil, err
			}
			grpcApp = s
			return closerFunc(s.Stop), nil
		})
	tcpW, tcpSC := serverSidecar(t, f, net, hub, r,
		framework.WorkloadOptions{Namespace: "demo", Service: "tcp-echo", ServicePort: tcpEchoPort, PortName: "tcp", AppProtocol: "tcp"},
		func(pod *framework.Pod, addr, id string) (io.Closer, error) {
			return framework.StartTCPEcho(ctx, pod, addr, id)
		})
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	cl := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	waitReady(t, cl, grpcSC, tcpSC)
	grpcID, tcpID := string(r.ID)+"/grpc-echo-0", string(r.ID)+"/tcp-echo-0"

	// gRPC through the client's Envoy: HTTP/2 to 127.0.0.1:8080 in the
	// client Pod, routed by :authority.
	grpcAuthority := fmt.Sprintf("%s:%d", grpcW.Hostname(), grpcEchoPort)
	cc, err := framework.DialGRPCInPod(clientPod, fmt.Sprintf("127.0.0.1:%d", grpcEchoPort), grpcAuthority)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	callOnce := func(call func(context.Context) (string, error), want string) func() error {
		return func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			id, err := call(cctx)
			if err != nil {
				return err
			}
			if id != want {
				return fmt.Errorf("answered by %q, want %q", id, want)
			}
			return nil
		}
	}
	viaEnvoy := func(cctx context.Context) (string, error) { return framework.CallEcho(cctx, cc) }
	testutil.Eventually(t, converge, poll, callOnce(viaEnvoy, grpcID))

	// Raw TCP through the client's Envoy (tcp_proxy both ends): the
	// server's greeting and the echo of what the client sent.
	const msg = "bytes, not requests\n"
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", tcpEchoPort)
	testutil.Eventually(t, converge, poll, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		id, echo, err := framework.CallTCPEcho(cctx, clientPod, tcpAddr, msg)
		if err != nil {
			return err
		}
		if id != tcpID || echo != msg {
			return fmt.Errorf("tcp echo: identity %q, echo %q; want %q, %q", id, echo, tcpID, msg)
		}
		return nil
	})

	// Both legs were mutual TLS: each server's inbound listener (on the
	// Pod IP, NONE mode; it requires a client certificate) completed TLS
	// handshakes.
	for _, sv := range []struct {
		sc   *framework.Sidecar
		port uint16
	}{{grpcSC, grpcW.TargetPort()}, {tcpSC, tcpW.TargetPort()}} {
		if n, err := inboundHandshakes(ctx, sv.sc, sv.port); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			t.Errorf("%s's inbound listener counted no TLS handshake", sv.sc.Name())
		} else {
			t.Logf("%s's inbound listener: %d TLS handshakes", sv.sc.Name(), n)
		}
	}

	// A proxyless grpc-go client of the same cluster, with a certificate of
	// the hub's CA, reaches the same server Pod: its channel dials the Pod
	// IP the hub hands out (198.18.x.y: the host reaches the pod network
	// over its bridge) and speaks mTLS to that Pod's Envoy, which checks
	// the client certificate as it does another sidecar's.
	_, roots := waitTrustBundle(t, hub)
	if err := r.EnsureServiceAccount(ctx, "demo", "proxyless"); err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, converge)
	defer acancel()
	ag, err := r.StartCertAgent(actx, "demo", "proxyless", t.TempDir(), framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ag.Stop)
	pl := framework.NewTestXDSClient(t, framework.ClientOptions{
		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
		Cluster: r.ID, Namespace: "demo", Locality: r.Locality, Name: "proxyless",
	})
	conn, err := pl.Dial(grpcW.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	proxyless := func(cctx context.Context) (string, error) { return conn.Call(cctx) }
	testutil.Eventually(t, converge, poll, callOnce(proxyless, grpcID))

	// Side by side: calls of both kinds alternate, all answered by the
	// one server app.
	before := grpcApp.Served()
	const rounds = 10
	for range rounds {
		for _, call := range []func(context.Context) (string, error){viaEnvoy, proxyless} {
			if err := callOnce(call, grpcID)(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := grpcApp.Served() - before; got != 2*rounds {
		t.Errorf("the gRPC app served %d calls, want %d", got, 2*rounds)
	}

	// Neither server answers plaintext from outside the mesh.
	outsider := framework.NewTestPod(t, net, framework.PodOptions{Name: "outsider"})
	octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
	defer ocancel()
	if id, _, err := framework.CallTCPEcho(octx, outsider, fmt.Sprintf("%s:%d", tcpSC.IP(), tcpW.TargetPort()), msg); err == nil {
		t.Errorf("plaintext TCP to %s's inbound port answered by %q", tcpSC.Name(), id)
	}
	occ, err := framework.DialGRPCInPod(outsider, fmt.Sprintf("%s:%d", grpcSC.IP(), grpcW.TargetPort()), grpcW.Hostname().String())
	if err != nil {
		t.Fatal(err)
	}
	defer occ.Close()
	if id, err := framework.CallEcho(octx, occ); err == nil {
		t.Errorf("plaintext gRPC to %s's inbound port answered by %q", grpcSC.Name(), id)
	}

	// Every Envoy took every resource: nothing NACKed (tcp_proxy, HTTP/2
	// clusters and the TLS contexts included), every type ACKed, and no
	// cluster left warming. A cluster changes when its first endpoint's
	// service account adds a SAN to match; if the hub's EDS update of
	// the same change reaches Envoy before the CDS update, the new
	// cluster warms for a ClusterLoadAssignment that never comes, and
	// Envoy withholds its CDS ACK (proxy-status: cds STALE).
	testutil.Eventually(t, converge, poll, func() error {
		for _, s := range []*framework.Sidecar{cl, grpcSC, tcpSC} {
			cfg, err := s.DynamicConfig(ctx)
			if err != nil {
				return err
			}
			if len(cfg.WarmingClusters) > 0 {
				return fmt.Errorf("%s: clusters %v still warming", s.Name(), cfg.WarmingClusters)
			}
		}
		return allSynced(t, hub, cl, grpcSC, tcpSC)
	})
}

// inboundHandshakes returns Envoy's count of TLS handshakes on the inbound
// listener <pod IP>_<port> of s (stat listener.<ip>_<port>.ssl.handshake,
// which Envoy keeps only with handshakeStats: Istio's bootstrap records
// few stats unless proxyStatsMatcher includes them).
func inboundHandshakes(ctx context.Context, s *framework.Sidecar, port uint16) (int, error) {
	return envoyCounter(ctx, s, fmt.Sprintf("listener.%s_%d.ssl.handshake", s.IP(), port))
}

// envoyCounter reads the value of Envoy's counter stat of s (which
// Istio's bootstrap keeps only when the proxy's proxyStatsMatcher asks).
func envoyCounter(ctx context.Context, s *framework.Sidecar, stat string) (int, error) {
	b, err := s.Admin(ctx, "/stats?filter="+url.QueryEscape("^"+regexp.QuoteMeta(stat)+"$"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), stat+": "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("%s: no stat %s in %q", s.Name(), stat, b)
}
