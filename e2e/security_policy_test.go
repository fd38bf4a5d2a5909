package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// peerAuthentication is demo's namespace-wide PeerAuthentication in mode.
func peerAuthentication(mode string) string {
	return fmt.Sprintf(`
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: demo}
spec:
  mtls: {mode: %s}
`, mode)
}

// denyPrincipal denies the echo workloads to one principal.
func denyPrincipal(principal string) string {
	return fmt.Sprintf(`
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client, namespace: demo}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - from: [{source: {principals: [%q]}}]
`, principal)
}

// TestSidecarSecurityPolicy: with no --xds-mtls (the mesh-wide default is
// then DISABLE), PeerAuthentication decides an Envoy server's inbound TLS
// and auto mTLS the clients': STRICT refuses a plaintext caller from
// outside the mesh while a sidecar client is answered over mTLS, PERMISSIVE
// answers both, and a DENY AuthorizationPolicy on the client's principal
// returns 403 to that client only.
func TestSidecarSecurityPolicy(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	ctx := t.Context()
	workloads, sidecars := echoSidecars(t, f, net, hub)
	r1 := f.Remote("cluster-1")
	server, w := sidecars[r1.ID], workloads[r1.ID]
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	client := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	otherPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "other"})
	other := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: otherPod, Hub: hub, Name: "other-0", Namespace: "demo", ServiceAccount: "other",
	})
	waitReady(t, server, client, other)
	outsider := framework.NewTestPod(t, net, framework.PodOptions{Name: "outsider"})
	inbound := fmt.Sprintf("%s:%d", server.IP(), w.TargetPort())
	plaintext := func() error {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := framework.GetHTTPEcho(pctx, outsider, inbound, string(echoHost))
		return err
	}
	// viaSidecar calls echo through s's Envoy and returns the reply's
	// x-forwarded-client-cert (empty over plaintext).
	viaSidecar := func(pod *framework.Pod) (envoyAnswer, string, error) {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		reply, err := framework.GetHTTPEcho(pctx, pod, fmt.Sprintf("127.0.0.1:%d", echoPortHTTP), fmt.Sprintf("%s:%d", echoHost, echoPortHTTP))
		if err != nil {
			a, gerr := newViaEnvoy(t, pod, echoHost).get(pctx, "/")
			return a, "", errors.Join(err, gerr)
		}
		return envoyAnswer{Status: http.StatusOK, Identity: reply.Identity}, reply.XFCC, nil
	}
	mtlsFrom := func(s *framework.Sidecar) func() error {
		return func() error {
			_, xfcc, err := viaSidecar(s.Pod())
			if err != nil {
				return err
			}
			if want := "URI=" + s.SPIFFEID(); !strings.Contains(xfcc, want) {
				return fmt.Errorf("x-forwarded-client-cert %q does not name %s: not mTLS", xfcc, want)
			}
			return nil
		}
	}

	// No policy: plaintext everywhere.
	testutil.Eventually(t, converge, poll, func() error {
		if err := plaintext(); err != nil {
			return fmt.Errorf("plaintext caller: %w", err)
		}
		_, xfcc, err := viaSidecar(clientPod)
		if err != nil {
			return err
		}
		if xfcc != "" {
			return fmt.Errorf("x-forwarded-client-cert %q without any policy: want plaintext", xfcc)
		}
		return nil
	})

	applyIstio(t, f, peerAuthentication("STRICT"))
	testutil.Eventually(t, converge, poll, func() error {
		if err := plaintext(); err == nil {
			return errors.New("STRICT: a plaintext caller was answered")
		}
		return mtlsFrom(client)()
	})

	applyIstio(t, f, peerAuthentication("PERMISSIVE"))
	testutil.Eventually(t, converge, poll, func() error {
		if err := plaintext(); err != nil {
			return fmt.Errorf("PERMISSIVE: plaintext caller: %w", err)
		}
		return mtlsFrom(client)()
	})

	applyIstio(t, f, denyPrincipal("cluster.local/ns/demo/sa/client"))
	testutil.Eventually(t, converge, poll, func() error {
		a, _, err := viaSidecar(clientPod)
		if a.Status != http.StatusForbidden {
			return fmt.Errorf("denied client: status %d (%v), want 403", a.Status, err)
		}
		return mtlsFrom(other)()
	})
	testutil.Consistently(t, time.Second, poll, func() error {
		if a, _, _ := viaSidecar(clientPod); a.Status != http.StatusForbidden {
			return fmt.Errorf("denied client: status %d, want 403", a.Status)
		}
		return nil
	})

	deleteIstio(t, f, "AuthorizationPolicy", "demo", "deny-client")
	testutil.Eventually(t, converge, poll, mtlsFrom(client))
}

// TestProxylessSecurityPolicy: the same for a proxyless xDS gRPC server
// and proxyless clients: with no policy both speak plaintext, STRICT
// makes the server refuse a plaintext caller while xDS clients with
// certificates switch to mTLS by themselves, and a DENY
// AuthorizationPolicy returns PERMISSION_DENIED to the denied principal
// only.
func TestProxylessSecurityPolicy(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	_, roots := waitTrustBundle(t, hub)
	certs := &framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots}
	c1 := f.Remote("cluster-1")
	w := deployServing(t, c1, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", Replicas: 1,
		XDS: &framework.XDSWorkloadOptions{HubAddr: hub.CAAddr(), Certs: certs},
	})
	client := dialXDS(t, certClientOptions(t, c1, hub, certs, "client"), w.Target())
	other := dialXDS(t, certClientOptions(t, c1, hub, certs, "other"), w.Target())

	rep := w.Replicas()[0]
	direct, err := grpc.NewClient(netip.AddrPortFrom(rep.PodIP, rep.Addr.Port()).String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(framework.DialPod))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	call := func(conn interface {
		Call(context.Context, ...grpc.CallOption) (string, error)
	}) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := conn.Call(cctx)
		return err
	}
	plaintext := func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := framework.CallEcho(cctx, direct)
		return err
	}
	// answeredAs checks that conn is answered and the server saw id.
	answeredAs := func(conn *framework.XDSConn, id string) error {
		if err := call(conn); err != nil {
			return err
		}
		if got := w.PeerIDs()[rep.Identity]; got != id {
			return fmt.Errorf("server saw peer %q, want %q", got, id)
		}
		return nil
	}
	const clientID, otherID = "spiffe://cluster.local/ns/demo/sa/client", "spiffe://cluster.local/ns/demo/sa/other"

	testutil.Eventually(t, converge, poll, func() error {
		if err := plaintext(); err != nil {
			return fmt.Errorf("no policy: plaintext caller: %w", err)
		}
		return answeredAs(client, "")
	})

	applyIstio(t, f, peerAuthentication("STRICT"))
	testutil.Eventually(t, converge, poll, func() error {
		if err := plaintext(); err == nil {
			return errors.New("STRICT: a plaintext caller was answered")
		}
		return answeredAs(client, clientID)
	})

	applyIstio(t, f, denyPrincipal(strings.TrimPrefix(clientID, "spiffe://")))
	testutil.Eventually(t, converge, poll, func() error {
		if err := call(client); status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("denied client: %v, want PERMISSION_DENIED", err)
		}
		return answeredAs(other, otherID)
	})

	deleteIstio(t, f, "AuthorizationPolicy", "demo", "deny-client")
	testutil.Eventually(t, converge, poll, func() error { return answeredAs(client, clientID) })
}

// TestSidecarEgressScope: a Sidecar whose egress hosts name only its own
// namespace shrinks what a client's Envoy holds (its config dump, the
// proxy's own account of its xDS state) to the services of that namespace,
// and the client still reaches them; removing it brings the rest back.
func TestSidecarEgressScope(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	ctx := t.Context()
	_, sidecars := echoSidecars(t, f, net, hub)
	r1 := f.Remote("cluster-1")
	const others = 5
	for i := range others {
		w, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: "elsewhere", Service: fmt.Sprintf("svc-%d", i), ServicePort: uint32(9100 + i), PortName: "http", AppProtocol: "http",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	// One more of namespace elsewhere on echo's port, so that the route
	// configuration of that port names a service out of scope.
	shared, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: "elsewhere", Service: "shared", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(shared.Stop)
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	client := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	waitReady(t, client, sidecars[r1.ID])
	// outbound counts the client's outbound clusters: all of them (the
	// fleet's own services too, such as default/kubernetes), those of
	// namespace elsewhere and those of its own namespace demo.
	var demo int
	outbound := func() (all, elsewhere int, listeners int, err error) {
		cfg, err := client.DynamicConfig(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		demo = 0
		for _, c := range cfg.Clusters {
			if strings.HasPrefix(c, "outbound|") {
				all++
				switch {
				case strings.HasSuffix(c, ".elsewhere.svc.cluster.local"):
					elsewhere++
				case strings.HasSuffix(c, ".demo.svc.cluster.local"):
					demo++
				}
			}
		}
		return all, elsewhere, len(cfg.Listeners), nil
	}
	reachesEcho := func() error {
		_, err := framework.GetHTTPEcho(ctx, clientPod, fmt.Sprintf("127.0.0.1:%d", echoPortHTTP), fmt.Sprintf("%s:%d", echoHost, echoPortHTTP))
		return err
	}
	var fullClusters, fullListeners int
	testutil.Eventually(t, converge, poll, func() error {
		all, elsewhere, l, err := outbound()
		if err != nil {
			return err
		}
		if elsewhere != others+1 {
			return fmt.Errorf("client holds %d outbound clusters of namespace elsewhere, want %d", elsewhere, others+1)
		}
		fullClusters, fullListeners = all, l
		return reachesEcho()
	})
	demoClusters := demo

	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: demo}
spec:
  egress:
  - hosts: ["./*"]
`)
	// sharedStatus is what the client's Envoy answers for the service out
	// of scope on echo's port: a route to its cluster, which has no app
	// behind it (503), or, scoped, no route at all (404).
	sharedStatus := func() (int, error) {
		a, err := newViaEnvoy(t, clientPod, "shared.elsewhere.svc.cluster.local").get(ctx, "/")
		return a.Status, err
	}
	if st, err := sharedStatus(); err != nil || st == http.StatusNotFound {
		t.Errorf("unscoped, the service on echo's port: status %d (%v), want a route to it", st, err)
	}
	var scopedClusters, scopedListeners int
	testutil.Eventually(t, converge, poll, func() error {
		all, elsewhere, l, err := outbound()
		if err != nil {
			return err
		}
		if elsewhere != 0 || all != demoClusters || l > fullListeners-others {
			return fmt.Errorf("scoped client holds %d outbound clusters (%d of elsewhere) and %d listeners, want %d (demo's), 0 and at most %d",
				all, elsewhere, l, demoClusters, fullListeners-others)
		}
		scopedClusters, scopedListeners = all, l
		if st, err := sharedStatus(); err != nil || st != http.StatusNotFound {
			return fmt.Errorf("scoped, the service out of scope on echo's port: status %d (%v), want 404", st, err)
		}
		return reachesEcho()
	})
	t.Logf("client without a Sidecar: %d outbound clusters, %d listeners; scoped to its namespace: %d, %d",
		fullClusters, fullListeners, scopedClusters, scopedListeners)

	deleteIstio(t, f, "Sidecar", "demo", "default")
	testutil.Eventually(t, converge, poll, func() error {
		if all, _, _, err := outbound(); err != nil || all != fullClusters {
			return fmt.Errorf("after the Sidecar left: %d outbound clusters (%v), want %d", all, err, fullClusters)
		}
		return nil
	})
}
