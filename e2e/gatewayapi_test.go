//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// gatewayClassIstio is the GatewayClass istio, as Istio installs it.
const gatewayClassIstio = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
`

const gatewayAPIWeb = gatewayClassIstio + `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: istio-ingress}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
  - name: https
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: web-cert}]}
  - name: teams
    port: 8080
    protocol: HTTP
    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {expose: "yes"}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: team, namespace: team-a}
spec:
  parentRefs: [{name: web, namespace: istio-ingress, sectionName: teams}]
  rules:
  - backendRefs: [{name: echo, namespace: demo, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-team-a, namespace: demo}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: team-a}]
  to: [{group: "", kind: Service}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echo, namespace: demo}
spec:
  parentRefs: [{name: web, namespace: istio-ingress}]
  hostnames: [echo.example.com]
  rules:
  - matches: [{headers: [{name: x-canary, value: "yes"}]}]
    backendRefs: [{name: echo-v2, port: 8080}]
  - backendRefs: [{name: echo, port: 8080, weight: 50}, {name: echo-v2, port: 8080, weight: 50}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc-echo, namespace: demo}
spec:
  parentRefs: [{name: web, namespace: istio-ingress}]
  hostnames: [grpc.example.com]
  rules:
  - matches: [{method: {service: meshfed.e2e.Echo}}]
    backendRefs: [{name: grpc-echo, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross, namespace: istio-ingress}
spec:
  parentRefs: [{name: web}]
  hostnames: [cross.example.com]
  rules:
  - backendRefs: [{name: echo, namespace: demo, port: 8080}]
`

const gatewayAPIGrant = `
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-ingress, namespace: demo}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: istio-ingress}]
  to: [{group: "", kind: Service}]
`

// routeCondition reads the condition typ of the first parent of route
// kind ns/name as "<status>/<reason>".
func routeCondition(ctx context.Context, c client.Client, kind, ns, name, typ string) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: kind})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return "", err
	}
	var conds []any
	if kind == "Gateway" {
		conds, _, _ = unstructured.NestedSlice(u.Object, "status", "conditions")
	} else {
		parents, _, _ := unstructured.NestedSlice(u.Object, "status", "parents")
		if len(parents) == 0 {
			return "no parents", nil
		}
		conds, _, _ = unstructured.NestedSlice(parents[0].(map[string]any), "conditions")
	}
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprintf("%v/%v", m["status"], m["reason"]), nil
		}
	}
	return "none", nil
}

// listenerCondition reads condition typ of listener of Gateway ns/name as
// "<status>/<reason>: <message>".
func listenerCondition(ctx context.Context, c client.Client, ns, name, listener, typ string) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return "", err
	}
	ls, _, _ := unstructured.NestedSlice(u.Object, "status", "listeners")
	for _, l := range ls {
		m := l.(map[string]any)
		if m["name"] != listener {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(m, "conditions")
		for _, cd := range conds {
			if cm := cd.(map[string]any); cm["type"] == typ {
				return fmt.Sprintf("%v/%v: %v", cm["status"], cm["reason"], cm["message"]), nil
			}
		}
	}
	return "none", nil
}

// TestGatewayAPI is the Gateway API part of issue #29's "Must show": the
// hub starts on a config cluster without the Gateway API's CRDs; once they
// are installed (no restart), a Gateway of class istio is served to the
// gateway Pod labelled with its name, an HTTPRoute's header match and
// weighted split reach the backends of cluster-2 through it, as does a
// GRPCRoute's gRPC call, a backend of
// another namespace is refused (ResolvedRefs False, RefNotPermitted; the
// route answers 500) until a ReferenceGrant allows it, a listener whose
// certificate Secret holds none is not resolved (InvalidCertificateRef),
// and the status conditions are read back from the apiserver.
func TestGatewayAPI(t *testing.T) {
	f, net, hub := sidecarFleet(t, 2, "--xds-mtls")
	ctx := t.Context()
	r2 := f.Remote("cluster-2")
	var backends []*framework.Sidecar
	for _, svc := range []string{"echo", "echo-v2"} {
		_, sc := httpEchoSidecar(t, f, net, hub, r2, svc)
		backends = append(backends, sc)
	}
	_, grpcSC := serverSidecar(t, f, net, hub, r2,
		framework.WorkloadOptions{Namespace: "demo", Service: "grpc-echo", ServicePort: grpcEchoPort},
		func(pod *framework.Pod, addr, id string) (io.Closer, error) {
			s, err := framework.StartGRPCEcho(ctx, pod, addr, id)
			if err != nil {
				return nil, err
			}
			return closerFunc(s.Stop), nil
		})
	backends = append(backends, grpcSC)
	gwPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "gw-2"})
	// The https listener's Secret holds no certificate: the listener is
	// not resolved, the rest serves.
	r1 := f.Remote("cluster-1")
	if err := r1.EnsureNamespace(ctx, ingressNamespace); err != nil {
		t.Fatal(err)
	}
	if err := putSecret(ctx, r1, ingressNamespace, "web-cert", map[string][]byte{"ca.crt": []byte("not a certificate")}); err != nil {
		t.Fatal(err)
	}
	gw := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: gwPod, Hub: hub, Name: "gw-2", Namespace: ingressNamespace, ServiceAccount: "web",
		Labels: map[string]string{istioconfig.GatewayNameLabel: "web"}, Gateway: true,
		XDS: framework.SidecarXDSTLS, XDSTLSAddr: hub.CAAddr(),
	})
	waitReady(t, append(backends, gw)...)

	// The CRDs arrive after the hub started.
	if err := f.Config().InstallGatewayAPICRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().ApplyIstio(ctx, gatewayAPIWeb); err != nil {
		t.Fatal(err)
	}
	caller := framework.NewTestPod(t, net, framework.PodOptions{Name: "api-client"})
	addr := gwPod.IP().String() + ":80"
	get := func(host, canary string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			return 0, "", err
		}
		req.Host = host
		if canary != "" {
			req.Header.Set("x-canary", canary)
		}
		resp, err := caller.HTTPClient().Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String(), nil
	}
	// The header match: only echo-v2.
	testutil.Eventually(t, converge, poll, func() error {
		for range 5 {
			code, body, err := get("echo.example.com", "yes")
			if err != nil {
				return err
			}
			if code != http.StatusOK || !strings.Contains(body, "cluster-2/echo-v2") {
				return fmt.Errorf("canary call: %d %s", code, body)
			}
		}
		return nil
	})
	// The weighted split: both, over 40 calls (each 50%: all on one side
	// has a probability of 2^-39).
	by := map[string]int{}
	for range 40 {
		code, body, err := get("echo.example.com", "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("split call: %d %s %v", code, body, err)
		}
		switch {
		case strings.Contains(body, "cluster-2/echo-v2"):
			by["echo-v2"]++
		case strings.Contains(body, "cluster-2/echo"):
			by["echo"]++
		}
	}
	if by["echo"] == 0 || by["echo-v2"] == 0 || by["echo"]+by["echo-v2"] != 40 {
		t.Errorf("weighted split answered by %v, want both", by)
	}

	// The GRPCRoute: a gRPC call by its method's service, over HTTP/2.
	cc, err := framework.DialGRPCInPod(caller, addr, "grpc.example.com")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	testutil.Eventually(t, converge, poll, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		id, err := framework.CallEcho(cctx, cc)
		if err != nil {
			return err
		}
		if id != "cluster-2/grpc-echo-0" {
			return fmt.Errorf("gRPC through the gateway answered by %q", id)
		}
		return nil
	})

	// Status, read back from the config cluster.
	c := f.Config().Client()
	for _, want := range []struct{ kind, ns, name, typ, value string }{
		{"Gateway", ingressNamespace, "web", "Accepted", "True/Accepted"},
		{"Gateway", ingressNamespace, "web", "Programmed", "True/Programmed"},
		{"HTTPRoute", "demo", "echo", "Accepted", "True/Accepted"},
		{"HTTPRoute", "demo", "echo", "ResolvedRefs", "True/ResolvedRefs"},
		{"GRPCRoute", "demo", "grpc-echo", "Accepted", "True/Accepted"},
		{"HTTPRoute", ingressNamespace, "cross", "ResolvedRefs", "False/RefNotPermitted"},
	} {
		testutil.Eventually(t, converge, poll, func() error {
			got, err := routeCondition(ctx, c, want.kind, want.ns, want.name, want.typ)
			if err != nil {
				return err
			}
			if got != want.value {
				return fmt.Errorf("%s %s/%s %s: %s, want %s", want.kind, want.ns, want.name, want.typ, got, want.value)
			}
			return nil
		})
	}
	testutil.Eventually(t, converge, poll, func() error {
		got, err := listenerCondition(ctx, c, ingressNamespace, "web", "https", "ResolvedRefs")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(got, "False/InvalidCertificateRef: in cluster cluster-1, namespace istio-ingress: xdsgen: credential: Secret web-cert holds neither") {
			return fmt.Errorf("listener https ResolvedRefs %s", got)
		}
		return nil
	})

	// The teams listener takes routes of namespaces labelled expose=yes:
	// team-a's once it is.
	if got, err := routeCondition(ctx, c, "HTTPRoute", "team-a", "team", "Accepted"); err != nil || got != "False/NotAllowedByListeners" {
		t.Errorf("team-a's route before its namespace is selected: %s %v", got, err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"expose": "yes"}
	if err := c.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		got, err := routeCondition(ctx, c, "HTTPRoute", "team-a", "team", "Accepted")
		if err != nil || got != "True/Accepted" {
			return fmt.Errorf("team-a's route once selected: %s %v", got, err)
		}
		resp, err := caller.HTTPClient().Get("http://" + gwPod.IP().String() + ":8080/")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("team-a's route through the teams listener: %d", resp.StatusCode)
		}
		return nil
	})

	// The cross-namespace backend is refused: 500, until a ReferenceGrant.
	if code, body, err := get("cross.example.com", ""); err != nil || code != http.StatusInternalServerError {
		t.Errorf("cross.example.com without a ReferenceGrant: %d %s %v, want 500", code, body, err)
	}
	if err := f.Config().ApplyIstio(ctx, gatewayAPIGrant); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		code, body, err := get("cross.example.com", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "cluster-2/echo") {
			return fmt.Errorf("cross.example.com with a ReferenceGrant: %d %s", code, body)
		}
		got, err := routeCondition(ctx, c, "HTTPRoute", ingressNamespace, "cross", "ResolvedRefs")
		if err != nil || got != "True/ResolvedRefs" {
			return fmt.Errorf("cross ResolvedRefs %s %v", got, err)
		}
		return nil
	})

	// Once written, a status stays: no write loop against the
	// apiserver's defaulting of what was written.
	writes := func() float64 {
		v, err := hub.MetricValue(ctx, "meshfed_config_status_writes_total", `result="ok"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	settled := writes()
	testutil.Consistently(t, 2*time.Second, 200*time.Millisecond, func() error {
		if w := writes(); w != settled {
			return fmt.Errorf("status writes went from %v to %v with nothing changing", settled, w)
		}
		return nil
	})
}
