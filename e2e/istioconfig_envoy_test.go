//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// versionedSidecars deploys, in each cluster-i of f, the HTTP service
// echo.demo:8080 with one sidecar Pod labelled version: v<i>, whose app
// answers "<cluster>/echo-0". The Pod's labels reach the hub through the
// Pod object the EndpointSlice points at, as a Deployment's would.
func versionedSidecars(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub) (map[model.ClusterID]*framework.HTTPEcho, []*framework.Sidecar) {
	t.Helper()
	ctx := t.Context()
	apps := map[model.ClusterID]*framework.HTTPEcho{}
	var sidecars []*framework.Sidecar
	for i, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: "demo", Service: "echo", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
		})
		if err != nil {
			t.Fatal(err)
		}
		pod := framework.NewTestPod(t, net, framework.PodOptions{Name: string(r.ID) + "-echo"})
		app, err := framework.StartHTTPEcho(ctx, pod, fmt.Sprintf("127.0.0.1:%d", w.TargetPort()), string(r.ID)+"/echo-0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Close() })
		apps[r.ID] = app
		sidecars = append(sidecars, framework.StartTestSidecar(t, f, framework.SidecarOptions{
			Cluster: r, Pod: pod, Hub: hub, Name: "echo-0", Namespace: "demo", Workload: w,
			Labels: map[string]string{"version": fmt.Sprintf("v%d", i+1)},
		}))
	}
	return apps, sidecars
}

// frontHost is a service whose app calls echo through its own Envoy.
const frontHost = model.Hostname("front.demo.svc.cluster.local")

// frontSidecar deploys front.demo:8080 in r with one sidecar Pod whose app
// answers every request with what its own Envoy answers to GET
// echo.demo:8080: one service calling another, so that a delay injected
// on the second hop meets the timeout of the first, as in Istio's
// request-timeouts task (reviews calling ratings). On a single hop the
// delay would not count: the route timeout starts when the router gets
// the request, after the fault filter has held it, and Istio documents
// that timeouts are not enabled with client-side faults.
func frontSidecar(t *testing.T, f *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub, r *framework.RemoteCluster) *framework.Sidecar {
	t.Helper()
	ctx := t.Context()
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: "demo", Service: "front", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "front"})
	l, err := pod.Listen(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", w.TargetPort()))
	if err != nil {
		t.Fatal(err)
	}
	echo := newViaEnvoy(t, pod, echoHost)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		a, err := echo.get(req.Context(), "/")
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		rw.WriteHeader(a.Status)
		_, _ = io.WriteString(rw, a.Body)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: hub, Name: "front-0", Namespace: "demo", Workload: w,
	})
}

// envoyAnswer is what the client saw of one request: the status, and for
// a 200 the identity of the answering app.
type envoyAnswer struct {
	Status   int
	Identity string
	Body     string
}

// viaEnvoy sends HTTP/1.1 requests from a Pod to host:8080 through the
// Pod's Envoy (127.0.0.1:8080 there). Connections are kept alive: Envoy
// routes every request anew, and reusing them keeps 1,000 requests fast.
type viaEnvoy struct {
	hc   *http.Client
	host model.Hostname
}

func newViaEnvoy(t *testing.T, pod *framework.Pod, host model.Hostname) *viaEnvoy {
	tr := &http.Transport{DialContext: pod.Dial}
	t.Cleanup(tr.CloseIdleConnections)
	return &viaEnvoy{hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, host: host}
}

// to is c sending to host instead.
func (c *viaEnvoy) to(host model.Hostname) *viaEnvoy { return &viaEnvoy{hc: c.hc, host: host} }

// get sends GET path with the headers (name, value pairs).
func (c *viaEnvoy) get(ctx context.Context, path string, header ...string) (envoyAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", echoPortHTTP, path), nil)
	if err != nil {
		return envoyAnswer{}, err
	}
	req.Host = fmt.Sprintf("%s:%d", c.host, echoPortHTTP)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return envoyAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return envoyAnswer{}, err
	}
	a := envoyAnswer{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	if a.Status == http.StatusOK {
		var reply framework.HTTPEchoReply
		if err := json.Unmarshal(body, &reply); err != nil {
			return a, fmt.Errorf("status 200 without an echo reply: %q", body)
		}
		a.Identity = reply.Identity
	}
	return a, nil
}

// spread sends n requests and counts the answers by cluster; any status
// but 200 is an error.
func (c *viaEnvoy) spread(ctx context.Context, n int, header ...string) (map[model.ClusterID]int, error) {
	by := map[model.ClusterID]int{}
	for i := range n {
		a, err := c.get(ctx, "/", header...)
		if err != nil {
			return by, err
		}
		if a.Status != http.StatusOK {
			return by, fmt.Errorf("request %d: status %d: %s", i, a.Status, a.Body)
		}
		cluster, _, _ := strings.Cut(a.Identity, "/")
		by[model.ClusterID(cluster)]++
	}
	return by, nil
}

// statuses sends n requests to path and counts the answers by status.
func (c *viaEnvoy) statuses(ctx context.Context, n int, path string) (map[int]int, error) {
	by := map[int]int{}
	for range n {
		a, err := c.get(ctx, path)
		if err != nil {
			return by, err
		}
		by[a.Status]++
	}
	return by, nil
}

// attemptTimeout bounds one attempt of a check below, so that an attempt
// made while a delay fault still applies does not use up Eventually's time.
const attemptTimeout = 10 * time.Second

// onlyFrom checks that n requests are all answered by cluster want.
func (c *viaEnvoy) onlyFrom(ctx context.Context, n int, want model.ClusterID, header ...string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		by, err := c.spread(ctx, n, header...)
		if err != nil {
			return err
		}
		if by[want] != n {
			return fmt.Errorf("answers by cluster %v, want %s only", by, want)
		}
		return nil
	}
}

// allStatus checks that n requests to path all get status want.
func (c *viaEnvoy) allStatus(ctx context.Context, n int, path string, want int) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		by, err := c.statuses(ctx, n, path)
		if err != nil {
			return err
		}
		if by[want] != n {
			return fmt.Errorf("statuses %v, want %d for all %d requests", by, want, n)
		}
		return nil
	}
}

// TestSidecarVirtualServiceTraffic is the Envoy half of issue #12's
// traffic "Must show", through the real hub: three clusters with an echo
// sidecar Pod each (version v1, v2, v3) and a client sidecar Pod in
// cluster-3, whose requests without config stay in its own cluster. A
// DestinationRule's subsets and a VirtualService's 90/10 split send 1,000
// requests to v1 and v2 within the binomial 99.9 % bound, none to v3; a
// header match sends all such requests to v2. A 100 % abort answers 418
// to every request; a 2 s delay on echo behind the 300 ms route timeout
// of a service that calls echo (front) answers 504; retries on 5xx make
// an app that fails every second request answer every request. Every
// Envoy took every version (no NACK), and removing the VirtualService
// and the DestinationRule brings back the default.
func TestSidecarVirtualServiceTraffic(t *testing.T) {
	f, net, hub := sidecarFleet(t, 3, "--xds-mtls")
	ctx := t.Context()
	apps, sidecars := versionedSidecars(t, f, net, hub)
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	cl := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: f.Remote("cluster-3"), Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	front := frontSidecar(t, f, net, hub, f.Remote("cluster-3"))
	all := append([]*framework.Sidecar{cl, front}, sidecars...)
	waitReady(t, all...)
	c := newViaEnvoy(t, clientPod, echoHost)
	synced := func() error { return allSynced(t, hub, all...) }

	// Without config, the client's own cluster answers everything.
	testutil.Eventually(t, converge, poll, c.onlyFrom(ctx, 20, "cluster-3"))

	// Subsets and the canary split.
	applyIstio(t, f, echoSubsets)
	applyIstio(t, f, echoCanary)
	testutil.Eventually(t, converge, poll, c.onlyFrom(ctx, 20, "cluster-2", "x-canary", "1"))
	testutil.Eventually(t, converge, poll, synced)
	const n = 1000
	by, err := c.spread(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	bound := binomialBound(n, 0.1)
	t.Logf("90/10 split over %d requests from Envoy: %v (v2 expected %d ± %.0f)", n, by, n/10, bound)
	if by["cluster-3"] != 0 || by["cluster-1"]+by["cluster-2"] != n {
		t.Errorf("requests outside subsets v1 and v2: %v", by)
	}
	if d := math.Abs(float64(by["cluster-2"]) - n*0.1); d > bound {
		t.Errorf("v2 got %d of %d requests, outside 10 %% ± %.0f", by["cluster-2"], n, bound)
	}
	if err := c.onlyFrom(ctx, 50, "cluster-2", "x-canary", "1")(); err != nil {
		t.Errorf("canary: %v", err)
	}

	// Abort: every request answered 418 by the client's Envoy.
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - fault: {abort: {httpStatus: 418, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
`)
	testutil.Eventually(t, converge, poll, c.allStatus(ctx, 20, "/", http.StatusTeapot))

	// A 2 s delay on echo, behind a 300 ms timeout on front, whose app
	// calls echo: 504 from the client's Envoy. Before the delay, the
	// same chain answers.
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: front, namespace: demo}
spec:
  hosts: [front]
  http:
  - timeout: 300ms
    route: [{destination: {host: front}}]
`)
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - route: [{destination: {host: echo, subset: v1}}]
`)
	viaFront := c.to(frontHost)
	testutil.Eventually(t, converge, poll, viaFront.onlyFrom(ctx, 5, "cluster-1"))
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - fault: {delay: {fixedDelay: 2s, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
`)
	testutil.Eventually(t, converge, poll, viaFront.allStatus(ctx, 3, "/", http.StatusGatewayTimeout))
	// The client's Envoy timed out, not some hop failing.
	if a, err := viaFront.get(ctx, "/"); err != nil || !strings.Contains(a.Body, "timeout") {
		t.Errorf("through front: %+v %v, want Envoy's timeout reply", a, err)
	}
	deleteIstio(t, f, "VirtualService", "demo", "front")

	// On one hop too: the timeout counts the delay of the same route's
	// fault (Envoy's stream duration runs from the request's start).
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - fault: {delay: {fixedDelay: 2s, percentage: {value: 100}}}
    timeout: 300ms
    route: [{destination: {host: echo, subset: v1}}]
`)
	testutil.Eventually(t, converge, poll, c.allStatus(ctx, 3, "/", http.StatusGatewayTimeout))

	// Retries: without them, an app that fails every second request
	// shows through; with attempts on 5xx, every request is answered
	// and the app's failures were absorbed.
	flaky := apps["cluster-1"]
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - retries: {attempts: 0}
    route: [{destination: {host: echo, subset: v1}}]
`)
	testutil.Eventually(t, converge, poll, c.onlyFrom(ctx, 20, "cluster-1"))
	flaky.SetFailEvery(2)
	if by, err := c.statuses(ctx, 20, "/"); err != nil || by[http.StatusOK] != 10 || by[http.StatusServiceUnavailable] != 10 {
		t.Errorf("without retries: statuses %v (%v), want 10 × 200 and 10 × 503", by, err)
	}
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - retries: {attempts: 3, retryOn: 5xx}
    route: [{destination: {host: echo, subset: v1}}]
`)
	// Once the retries arrive, 20 requests in a row succeed: the first at
	// once, each other after one failure (the app's even requests), so
	// Envoy retried 19 times.
	testutil.Eventually(t, converge, poll, func() error {
		flaky.SetFailEvery(2)
		if err := c.onlyFrom(ctx, 20, "cluster-1")(); err != nil {
			return err
		}
		if got := flaky.Failed(); got != 19 {
			return fmt.Errorf("the app failed %d requests, want 19, each retried", got)
		}
		return nil
	})
	flaky.SetFailEvery(0)
	testutil.Eventually(t, converge, poll, synced)

	// Removal: back to the client's own cluster.
	deleteIstio(t, f, "VirtualService", "demo", "echo")
	deleteIstio(t, f, "DestinationRule", "demo", "echo")
	testutil.Eventually(t, converge, poll, c.onlyFrom(ctx, 20, "cluster-3"))
	testutil.Eventually(t, converge, poll, synced)
}

// TestSidecarSourceLabels: a VirtualService match on the client's labels
// (sourceLabels) sends the requests of the Envoy sidecars that carry them
// to subset v2 (cluster-2) and everyone else's to v1 (cluster-1), both
// clients in cluster-1, whose Pods the registry does not know (no Service
// selects them), so the hub classes them by the labels pilot-agent puts
// in their nodes. Changing the match swaps them without a reconnection;
// removing the VirtualService sends both back to their own cluster.
func TestSidecarSourceLabels(t *testing.T) {
	f, net, hub := sidecarFleet(t, 2)
	ctx := t.Context()
	_, echoes := versionedSidecars(t, f, net, hub)
	client := func(name, track string) (*framework.Sidecar, *viaEnvoy) {
		pod := framework.NewTestPod(t, net, framework.PodOptions{Name: name})
		sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
			Cluster: f.Remote("cluster-1"), Pod: pod, Hub: hub, Name: name + "-0", Namespace: "demo",
			Labels: map[string]string{"track": track},
		})
		return sc, newViaEnvoy(t, pod, echoHost)
	}
	stableSC, stable := client("stable", "stable")
	canarySC, canary := client("canary", "canary")
	all := append([]*framework.Sidecar{stableSC, canarySC}, echoes...)
	waitReady(t, all...)
	testutil.Eventually(t, converge, poll, stable.onlyFrom(ctx, 20, "cluster-1"))
	testutil.Eventually(t, converge, poll, canary.onlyFrom(ctx, 20, "cluster-1"))

	byTrack := func(track string) string {
		return `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - name: by-track
    match: [{sourceLabels: {track: ` + track + `}}]
    route: [{destination: {host: echo, subset: v2}}]
  - route: [{destination: {host: echo, subset: v1}}]
`
	}
	applyIstio(t, f, echoSubsets)
	applyIstio(t, f, byTrack("canary"))
	testutil.Eventually(t, converge, poll, canary.onlyFrom(ctx, 50, "cluster-2"))
	testutil.Eventually(t, converge, poll, stable.onlyFrom(ctx, 50, "cluster-1"))
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, all...) })

	// The other track now: both sidecars change class, their listeners
	// name other routes, and the traffic swaps.
	applyIstio(t, f, byTrack("stable"))
	testutil.Eventually(t, converge, poll, stable.onlyFrom(ctx, 50, "cluster-2"))
	testutil.Eventually(t, converge, poll, canary.onlyFrom(ctx, 50, "cluster-1"))
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, all...) })

	deleteIstio(t, f, "VirtualService", "demo", "echo")
	testutil.Eventually(t, converge, poll, stable.onlyFrom(ctx, 20, "cluster-1"))
	testutil.Eventually(t, converge, poll, canary.onlyFrom(ctx, 20, "cluster-1"))
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, all...) })
}

// TestSidecarIngressListener: a Sidecar whose ingress listener takes the
// echo Pod's port and forwards to another port of the Pod's loopback
// makes the app there answer what clients send to the Service, through
// the echo Pod's own Envoy; removing the Sidecar brings back the app on
// the Service's target port.
func TestSidecarIngressListener(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	ctx := t.Context()
	r1 := f.Remote("cluster-1")
	w, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", ServicePort: echoPortHTTP, PortName: "http", AppProtocol: "http",
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "echo"})
	for addr, id := range map[string]string{
		fmt.Sprintf("127.0.0.1:%d", w.TargetPort()):   "cluster-1/app",
		fmt.Sprintf("127.0.0.1:%d", w.TargetPort()+1): "cluster-1/ingress",
	} {
		app, err := framework.StartHTTPEcho(ctx, pod, addr, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Close() })
	}
	echo := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: pod, Hub: hub, Name: "echo-0", Namespace: "demo", Workload: w,
	})
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	client := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo",
	})
	waitReady(t, echo, client)
	c := newViaEnvoy(t, clientPod, echoHost)
	answeredBy := func(want string) func() error {
		return func() error {
			for range 10 {
				a, err := c.get(ctx, "/")
				if err != nil {
					return err
				}
				if a.Identity != want {
					return fmt.Errorf("answered by %q (status %d %s), want %q", a.Identity, a.Status, a.Body, want)
				}
			}
			return nil
		}
	}
	testutil.Eventually(t, converge, poll, answeredBy("cluster-1/app"))

	applyIstio(t, f, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: echo-ingress, namespace: demo}
spec:
  workloadSelector: {labels: {app: echo}}
  ingress:
  - port: {number: %d, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:%d
`, w.TargetPort(), w.TargetPort()+1))
	testutil.Eventually(t, converge, poll, answeredBy("cluster-1/ingress"))
	testutil.Eventually(t, converge, poll, func() error { return allSynced(t, hub, echo, client) })

	deleteIstio(t, f, "Sidecar", "demo", "echo-ingress")
	testutil.Eventually(t, converge, poll, answeredBy("cluster-1/app"))
}
