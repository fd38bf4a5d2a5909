package e2e

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// echoServer starts a plain gRPC echo server (no xDS, no mesh) on
// loopback, answering as identity.
func echoServer(t *testing.T, identity string) *framework.EchoServer {
	t.Helper()
	s, err := framework.StartEchoServer("127.0.0.1:0", identity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// serviceEntries are the ServiceEntries of TestServiceEntryProxyless: a
// MESH_EXTERNAL host at a fixed address, one found by DNS (localhost), a
// MESH_INTERNAL entry that adds a machine outside Kubernetes to the echo
// Service, and a pass-through entry proxies get nothing of.
func serviceEntries(static, dns, vm uint16, vmLocality string) string {
	return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-static, namespace: demo}
spec:
  hosts: [static.ext.test]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{number: 7000, name: grpc, protocol: GRPC}]
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-dns, namespace: demo}
spec:
  hosts: [dns.ext.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 7001, name: grpc, protocol: GRPC}]
  endpoints: [{address: localhost, ports: {grpc: %d}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-vm, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}, locality: %s}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: passthrough, namespace: demo}
spec:
  hosts: [any.ext.test]
  resolution: NONE
  ports: [{number: 443, name: tls, protocol: TLS}]
`, static, dns, vm, vmLocality)
}

// TestServiceEntryProxyless: proxyless gRPC clients reach ServiceEntry
// hosts: a MESH_EXTERNAL one at a fixed address (STATIC), one resolved by
// DNS (a LOGICAL_DNS cluster of localhost), and a MESH_INTERNAL entry's
// machine answers for the echo Service beside its Pods; a NONE entry is
// applied with a note that proxies get nothing of it; deleting an entry
// takes its host away.
func TestServiceEntryProxyless(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1)})
	ctx := t.Context()
	r := f.Remotes()[0]
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	static, dns, vm := echoServer(t, "ext/static"), echoServer(t, "ext/dns"), echoServer(t, "vm/echo")
	// The machine is in the client's locality, so that it shares the load
	// with the Pod rather than standing by for it.
	applyIstio(t, f, serviceEntries(static.Addr().Port(), dns.Addr().Port(), vm.Addr().Port(), strings.TrimRight(r.Locality.String(), "/")))

	ag := framework.StartTestCertAgent(t, r, hub, "demo", "client")
	client := framework.NewTestXDSClient(t, framework.ClientOptions{
		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
		Cluster: r.ID, Namespace: "demo", Locality: r.Locality, Name: "client",
	})
	dial := func(target string) *framework.XDSConn {
		t.Helper()
		conn, err := client.Dial(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	answeredBy := func(conn *framework.XDSConn, n int, want ...string) {
		t.Helper()
		testutil.Eventually(t, converge, poll, func() error {
			counts, err := conn.Spread(ctx, n)
			if err != nil {
				return err
			}
			for _, id := range want {
				if counts[id] == 0 {
					return fmt.Errorf("%s: answers %v, want some from each of %v", conn.Target(), counts, want)
				}
			}
			if len(counts) != len(want) {
				return fmt.Errorf("%s: answers %v, want only %v", conn.Target(), counts, want)
			}
			return nil
		})
	}
	toStatic := dial("xds:///static.ext.test:7000")
	answeredBy(toStatic, 5, "ext/static")
	answeredBy(dial("xds:///dns.ext.test:7001"), 5, "ext/dns")
	// The Pod and the machine of the entry share the echo Service.
	answeredBy(dial(echoTarget), 40, string(r.ID)+"/echo-0", "vm/echo")

	cz, err := hub.Configz(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ext-static", "ext-dns", "echo-vm", "passthrough"} {
		o, ok := cz.Object("ServiceEntry", "demo", name)
		if !ok || o.State != debugdoc.ConfigApplied {
			t.Errorf("configz: ServiceEntry %s: %+v", name, o)
		}
	}
	if o, _ := cz.Object("ServiceEntry", "demo", "passthrough"); !strings.Contains(strings.Join(o.Notes, "\n"), "resolution: NONE") {
		t.Errorf("passthrough notes %q, want why proxies get nothing", o.Notes)
	}

	deleteIstio(t, f, "ServiceEntry", "demo", "ext-static")
	testutil.Eventually(t, converge, poll, func() error {
		if id, err := toStatic.Call(ctx); err == nil {
			return fmt.Errorf("static.ext.test still answered, by %s", id)
		}
		return nil
	})
	if static.Served() == 0 {
		t.Error("the static backend counted no call")
	}
}

// TestServiceEntrySidecar: an Envoy sidecar reaches ServiceEntry hosts
// outside the mesh over HTTP: one at a fixed address (STATIC, an EDS
// cluster) and one by a DNS name (a STRICT_DNS cluster that Envoy
// resolves; the name is in the client Pod's /etc/hosts), both plaintext
// (MESH_EXTERNAL never speaks mTLS), and config-status shows the sidecar
// holding the entry; deleting an entry takes its host away.
func TestServiceEntrySidecar(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	ctx := t.Context()
	r1 := f.Remote("cluster-1")
	ext := framework.NewTestPod(t, net, framework.PodOptions{Name: "ext"})
	for port, id := range map[int]string{7080: "ext/static", 7081: "ext/dns"} {
		app, err := framework.StartHTTPEcho(ctx, ext, fmt.Sprintf("%s:%d", ext.IP(), port), id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Close() })
	}
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client",
		Hosts: map[string]netip.Addr{"backend.ext.test": ext.IP()}})
	client := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	applyIstio(t, f, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-static, namespace: demo}
spec:
  hosts: [static.ext.test]
  resolution: STATIC
  ports: [{number: 7000, name: http, protocol: HTTP}]
  endpoints: [{address: %s, ports: {http: 7080}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-dns, namespace: demo}
spec:
  hosts: [dns.ext.test]
  resolution: DNS
  ports: [{number: 7001, name: http, protocol: HTTP}]
  endpoints: [{address: backend.ext.test, ports: {http: 7081}}]
`, ext.IP()))
	waitReady(t, client)
	reaches := func(port int, host, want string) {
		t.Helper()
		testutil.Eventually(t, converge, poll, func() error {
			reply, err := framework.GetHTTPEcho(ctx, clientPod, fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("%s:%d", host, port))
			if err != nil {
				return err
			}
			if reply.Identity != want || reply.XFCC != "" {
				return fmt.Errorf("%s answered by %q (XFCC %q), want %s in plaintext", host, reply.Identity, reply.XFCC, want)
			}
			return nil
		})
	}
	reaches(7000, "static.ext.test", "ext/static")
	reaches(7001, "dns.ext.test", "ext/dns")
	// The fleet's config status follows the Envoy sidecar too (pilot-agent
	// speaks Delta xDS): it holds the entry.
	testutil.Eventually(t, converge, poll, func() error {
		o, err := configStatus(t, hub, "ServiceEntry/demo/ext-dns")
		if err != nil {
			return err
		}
		if o.Proxies != 1 || o.Synced != 1 {
			return fmt.Errorf("%s (pending %+v), want the sidecar synced", o.Summary(), o.Pending)
		}
		return nil
	})
	dump, err := client.ConfigDump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"outbound|7001||dns.ext.test"`, `"STRICT_DNS"`, `"backend.ext.test"`, `"outbound|7000||static.ext.test"`} {
		if !strings.Contains(string(dump), s) {
			t.Errorf("Envoy's config dump lacks %s", s)
		}
	}

	deleteIstio(t, f, "ServiceEntry", "demo", "ext-static")
	testutil.Eventually(t, converge, poll, func() error {
		if reply, err := framework.GetHTTPEcho(ctx, clientPod, "127.0.0.1:7000", "static.ext.test:7000"); err == nil {
			return fmt.Errorf("static.ext.test still answered, by %s", reply.Identity)
		}
		return nil
	})
	reaches(7001, "dns.ext.test", "ext/dns")
}

// TestDestinationRuleTLSOrigination: an Envoy sidecar originates TLS to a
// ServiceEntry host outside the mesh (DestinationRule tls SIMPLE): the app
// speaks plaintext HTTP, the server sees TLS with the DestinationRule's
// SNI, and Envoy verifies the server against caCertificates: with a CA
// that did not sign the server's certificate, calls fail.
func TestDestinationRuleTLSOrigination(t *testing.T) {
	f, net, hub := sidecarFleet(t, 1)
	ctx := t.Context()
	r1 := f.Remote("cluster-1")
	now := time.Now()
	ca, err := pki.NewCA("meshfed-e2e external CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("meshfed-e2e other CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{DNSNames: []string{"secure.ext.test"}, Server: true, Validity: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, otherFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	for file, pem := range map[string][]byte{caFile: ca.CertPEM, otherFile: other.CertPEM} {
		if err := os.WriteFile(file, pem, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ext := framework.NewTestPod(t, net, framework.PodOptions{Name: "ext"})
	app, err := framework.StartHTTPSEcho(ctx, ext, fmt.Sprintf("%s:8443", ext.IP()), "ext/secure",
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	clientPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
	client := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: clientPod, Hub: hub, Name: "client-0", Namespace: "demo", ServiceAccount: "client",
	})
	rule := func(caFile string) string {
		return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: secure, namespace: demo}
spec:
  host: secure.ext.test
  trafficPolicy:
    tls: {mode: SIMPLE, caCertificates: %s, sni: secure.ext.test}
`, caFile)
	}
	applyIstio(t, f, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: secure, namespace: demo}
spec:
  hosts: [secure.ext.test]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: %s, ports: {http: 8443}}]
`, ext.IP())+"---"+rule(caFile))
	waitReady(t, client)
	call := func() (*framework.HTTPEchoReply, error) {
		return framework.GetHTTPEcho(ctx, clientPod, "127.0.0.1:80", "secure.ext.test")
	}
	testutil.Eventually(t, converge, poll, func() error {
		reply, err := call()
		if err != nil {
			return err
		}
		if reply.Identity != "ext/secure" || !reply.TLS || reply.SNI != "secure.ext.test" {
			return fmt.Errorf("reply %+v, want ext/secure over TLS with SNI secure.ext.test", reply)
		}
		return nil
	})

	// A CA that did not sign the server: Envoy refuses the handshake.
	applyIstio(t, f, rule(otherFile))
	testutil.Eventually(t, converge, poll, func() error {
		if reply, err := call(); err == nil {
			return fmt.Errorf("answered by %s despite a CA that did not sign it", reply.Identity)
		}
		return nil
	})
}
