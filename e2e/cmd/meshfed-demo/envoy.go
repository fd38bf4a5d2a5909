package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// sidecarsSkipped says why this machine cannot run the demo's Envoy
// sidecars and gateway ("" when it can): each Pod is a network namespace,
// and pilot-agent and Envoy must be built.
func sidecarsSkipped() string {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Sprintf("each Pod is a network namespace, which needs root (this is uid %d)", uid)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "iproute2's ip, which makes the Pods' network namespaces, is not installed"
	}
	var o framework.SidecarOptions
	if err := o.BinariesFromEnv(); err != nil {
		return err.Error() + " (make demo builds them as root: make envoy pilot-agent)"
	}
	return ""
}

// istioIngress routes web.example.com through an Istio ingress gateway.
const istioIngress = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*/web.example.com"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-ingress, namespace: demo}
spec:
  hosts: [web.example.com]
  gateways: [istio-ingress/public]
  http:
  - route: [{destination: {host: web}}]
`

// envoyDemo runs Istio's own data plane against the hub: an HTTP service
// web.demo behind an Envoy sidecar (pilot-agent, as the spoke injects it)
// in cluster-1, a client Pod with a sidecar in cluster-2 calling it through
// its Envoy, and an ingress gateway (pilot-agent `proxy router`) in
// cluster-1 that an outside client calls by Host. It returns what stops
// the Pods' processes.
func envoyDemo(ctx context.Context, d *demo, fleet *framework.Fleet, net *framework.PodNetwork, hub *framework.Hub) (func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (func(), error) { stop(); return func() {}, err }
	startSidecar := func(o framework.SidecarOptions) (*framework.Sidecar, error) {
		o.Hub = hub
		if err := o.BinariesFromEnv(); err != nil {
			return nil, err
		}
		s, err := fleet.StartSidecar(ctx, o)
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { _ = s.Stop() })
		return s, nil
	}

	d.say("Envoy sidecars: web.demo (an HTTP app behind pilot-agent and Envoy 1.40, injected as the spoke injects it) in cluster-1, a client Pod with a sidecar in cluster-2")
	r1, r2 := fleet.Remote("cluster-1"), fleet.Remote("cluster-2")
	w, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "web", ServicePort: 8080, PortName: "http", AppProtocol: "http"})
	if err != nil {
		return fail(err)
	}
	webPod, err := net.AddPod(ctx, framework.PodOptions{Name: "web-0"})
	if err != nil {
		return fail(err)
	}
	app, err := framework.StartHTTPEcho(ctx, webPod, fmt.Sprintf("127.0.0.1:%d", w.TargetPort()), "cluster-1/web-0")
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { _ = app.Close() })
	web, err := startSidecar(framework.SidecarOptions{Cluster: r1, Pod: webPod, Name: "web-0", Namespace: "demo", Workload: w})
	if err != nil {
		return fail(err)
	}
	clientPod, err := net.AddPod(ctx, framework.PodOptions{Name: "curl-0"})
	if err != nil {
		return fail(err)
	}
	client, err := startSidecar(framework.SidecarOptions{Cluster: r2, Pod: clientPod, Name: "curl-0", Namespace: "demo", ServiceAccount: "curl"})
	if err != nil {
		return fail(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, s := range []*framework.Sidecar{web, client} {
		if err := s.WaitReady(rctx); err != nil {
			return fail(err)
		}
	}
	d.detail("web-0 %s and curl-0 %s ready: certificates from the hub's CA, config over its authenticated port", webPod.IP(), clientPod.IP())
	var reply *framework.HTTPEchoReply
	if err := testutil.Poll(rctx, time.Minute, 100*time.Millisecond, func() error {
		var err error
		reply, err = framework.GetHTTPEcho(rctx, clientPod, "127.0.0.1:8080", "web.demo.svc.cluster.local:8080")
		return err
	}); err != nil {
		return fail(fmt.Errorf("curl-0 → web.demo through its Envoy: %w", err))
	}
	d.detail("curl-0 (cluster-2) GET http://web.demo:8080/ through its Envoy: answered by %s over mutual TLS", reply.Identity)
	d.detail("web-0's Envoy saw the caller's certificate: %s (x-forwarded-client-cert)", callerOf(reply.XFCC))

	d.say("An Istio ingress gateway (pilot-agent `proxy router`) in cluster-1, selected by an Istio Gateway; a VirtualService routes web.example.com to web.demo")
	if err := fleet.Config().ApplyIstio(ctx, istioIngress); err != nil {
		return fail(err)
	}
	gwPod, err := net.AddPod(ctx, framework.PodOptions{Name: "gw-0"})
	if err != nil {
		return fail(err)
	}
	gw, err := startSidecar(framework.SidecarOptions{Cluster: r1, Pod: gwPod, Name: "gw-0", Namespace: "istio-ingress",
		ServiceAccount: "ingressgateway", Labels: map[string]string{"istio": "ingressgateway"}, Gateway: true})
	if err != nil {
		return fail(err)
	}
	if err := gw.WaitReady(rctx); err != nil {
		return fail(err)
	}
	outside, err := net.AddPod(ctx, framework.PodOptions{Name: "outside"})
	if err != nil {
		return fail(err)
	}
	addr := gwPod.IP().String() + ":80"
	if err := testutil.Poll(rctx, time.Minute, 100*time.Millisecond, func() error {
		var err error
		reply, err = framework.GetHTTPEcho(rctx, outside, addr, "web.example.com")
		if err == nil && reply.Identity != "cluster-1/web-0" {
			err = errors.New("answered by " + reply.Identity)
		}
		return err
	}); err != nil {
		return fail(fmt.Errorf("outside → web.example.com through the gateway: %w", err))
	}
	d.detail("outside GET http://%s/ with Host web.example.com: answered by %s; web-0's Envoy saw the gateway's certificate: %s", addr, reply.Identity, callerOf(reply.XFCC))
	return stop, nil
}

// callerOf is the URI (SPIFFE ID) of the client certificate an
// x-forwarded-client-cert header names.
func callerOf(xfcc string) string {
	for _, part := range strings.Split(xfcc, ";") {
		if uri, ok := strings.CutPrefix(part, "URI="); ok {
			return uri
		}
	}
	return "none (" + xfcc + ")"
}
