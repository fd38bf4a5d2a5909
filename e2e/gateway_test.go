//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// ingressNamespace holds the gateway Pods and their Istio Gateways, as
// Istio's docs deploy them.
const ingressNamespace = "istio-ingress"

// ingressGateway starts a gateway Pod (real pilot-agent `proxy router`
// and Envoy, rendered by the spoke's gateway template) labelled
// istio=ingressgateway in cluster r, and returns it with its Pod.
func ingressGateway(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub, r *framework.RemoteCluster, name string) (*framework.Sidecar, *framework.Pod) {
	t.Helper()
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: name})
	gw := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: name, Namespace: ingressNamespace, ServiceAccount: "ingressgateway",
		Labels: map[string]string{"istio": "ingressgateway"}, Gateway: true,
	})
	return gw, pod
}

// httpEchoSidecar runs, in cluster r, an HTTP echo behind a sidecar as
// the endpoint of Service demo/<svc> (port echoPortHTTP, appProtocol
// http); it answers as "<cluster>/<svc>-0".
func httpEchoSidecar(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub, r *framework.RemoteCluster, svc string) (*framework.Workload, *framework.Sidecar) {
	t.Helper()
	return serverSidecar(t, f, net, hub, r,
		framework.WorkloadOptions{Namespace: "demo", Service: svc, ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http"},
		func(pod *framework.Pod, addr, id string) (io.Closer, error) {
			return framework.StartHTTPEcho(t.Context(), pod, addr, id)
		})
}

// podGet sends GET http://<addr><path> with Host host from pod without
// following redirects, and returns the status, the Location header and
// the body.
func podGet(ctx context.Context, pod *framework.Pod, addr, host, path string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Host = host
	c := *pod.HTTPClient()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(body), err
}

const ingressGatewayHTTP = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*/echo.example.com", "*/old.example.com"]
  - port: {number: 8081, name: http-redirect, protocol: HTTP}
    hosts: ["*"]
    tls: {httpsRedirect: true}
`

const echoIngressRoute = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-ingress, namespace: demo}
spec:
  hosts: [echo.example.com, old.example.com]
  gateways: [istio-ingress/public]
  http:
  - match: [{authority: {exact: old.example.com}}]
    redirect: {authority: echo.example.com}
  - route: [{destination: {host: echo}}]
`

// TestIngressGatewayHTTP is the first part of issue #29's "Must show": a
// gateway Pod in cluster-1 (Istio's pilot-agent `proxy router` driving
// Envoy 1.40) selected by an Istio Gateway, and echo backends with
// sidecars in cluster-2 only. HTTP through the gateway by Host reaches
// them over mutual TLS (the backend's sidecar names the gateway's SPIFFE
// ID in XFCC); an unknown host gets a 404; a VirtualService redirect and
// a server's httpsRedirect answer 301; deleting the VirtualService makes
// its host 404 again. The hub lists the gateway with every type SYNCED,
// through meshfedctl and istioctl.
func TestIngressGatewayHTTP(t *testing.T) {
	f, net, hub := sidecarFleet(t, 2, "--xds-mtls")
	ctx := t.Context()
	r2 := f.Remote("cluster-2")
	_, backend := httpEchoSidecar(t, f, net, hub, r2, "echo")

	if err := f.Config().ApplyIstio(ctx, ingressGatewayHTTP+"---"+echoIngressRoute); err != nil {
		t.Fatal(err)
	}
	gw, gwPod := ingressGateway(t, f, net, hub, f.Remote("cluster-1"), "gw-0")
	waitReady(t, gw, backend)

	client := framework.NewTestPod(t, net, framework.PodOptions{Name: "outside"})
	addr := gwPod.IP().String() + ":80"
	testutil.Eventually(t, converge, poll, func() error {
		code, _, body, err := podGet(ctx, client, addr, "echo.example.com", "/")
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "cluster-2/echo-0") {
			return fmt.Errorf("echo.example.com through the gateway: %d %q", code, body)
		}
		return nil
	})
	reply, err := framework.GetHTTPEcho(ctx, client, addr, "echo.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if want := "URI=" + gw.SPIFFEID(); !strings.Contains(reply.XFCC, want) {
		t.Errorf("the backend's x-forwarded-client-cert %q does not name the gateway (%s): not mutual TLS", reply.XFCC, want)
	}

	if code, _, body, err := podGet(ctx, client, addr, "unknown.example.com", "/"); err != nil || code != http.StatusNotFound {
		t.Errorf("unknown host through the gateway: %d %q %v, want 404", code, body, err)
	}
	if code, loc, _, err := podGet(ctx, client, addr, "old.example.com", "/x"); err != nil || code != http.StatusMovedPermanently ||
		loc != "http://echo.example.com/x" {
		t.Errorf("old.example.com: %d Location %q %v, want 301 to http://echo.example.com/x", code, loc, err)
	}
	if code, loc, _, err := podGet(ctx, client, gwPod.IP().String()+":8081", "echo.example.com", "/y"); err != nil ||
		code != http.StatusMovedPermanently || loc != "https://echo.example.com/y" {
		t.Errorf("httpsRedirect: %d Location %q %v, want 301 to https://echo.example.com/y", code, loc, err)
	}

	// The gateway is a proxy like the others: every type SYNCED.
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, gw, backend) })
	// istioctl's usual way: a token it mints for istio-system/default of
	// the config cluster, over TLS (envtest runs no controller-manager to
	// create that account).
	if err := f.Config().EnsureServiceAccount(ctx, istioNamespace, "default"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		out, err := istioctl(t, f, "proxy-status", "--xds-address", hub.CAAddr(), "-o", "json")
		if err != nil {
			return err
		}
		got, err := proxyStatusJSON(out)
		if err != nil {
			return err
		}
		// istioctl names proxies <pod>.<namespace>.
		p, ok := got[gw.Name()+"."+ingressNamespace]
		if !ok {
			return fmt.Errorf("istioctl does not list %s: %v", gw.Name(), got)
		}
		if p.cluster != "cluster-1" || len(p.types) < 4 {
			return fmt.Errorf("istioctl shows the gateway in %q with %v", p.cluster, p.types)
		}
		for typ, s := range p.types {
			if s != statusv3.ConfigStatus_SYNCED {
				return fmt.Errorf("istioctl shows the gateway's %s %v", typ, s)
			}
		}
		return nil
	})

	// meshfedctl explain works for a gateway as for a sidecar: the
	// backend in cluster-2, sent (priority 0: the only cluster with one).
	out, err := framework.Meshfedctl(t, "explain", "--monitoring", hub.MonitoringURL(), "-o", "json",
		gw.Name()+"."+ingressNamespace, fmt.Sprintf("echo.demo:%d", echoPortHTTP))
	if err != nil {
		t.Fatal(err)
	}
	var x debugdoc.Explainz
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("explain: %v: %s", err, out)
	}
	if x.Proxy != gw.NodeID() || x.Cluster != "cluster-1" || len(x.Endpoints) != 1 || !x.Endpoints[0].Sent ||
		x.Endpoints[0].Cluster != "cluster-2" {
		t.Errorf("explain of the gateway: %s", out)
	}

	// The VirtualService deleted: its host is unknown again.
	if err := f.Config().DeleteIstio(ctx, "VirtualService", "demo", "echo-ingress"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		code, _, body, err := podGet(ctx, client, addr, "echo.example.com", "/")
		if err != nil {
			return err
		}
		if code != http.StatusNotFound {
			return fmt.Errorf("after the VirtualService's deletion: %d %q, want 404", code, body)
		}
		return nil
	})
}
