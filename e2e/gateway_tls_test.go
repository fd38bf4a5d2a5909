//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// testPKI issues certificates for the TLS tests: a CA and leaves signed
// by it.
type testPKI struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestPKI(t *testing.T, cn string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testPKI{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf issues a certificate for dnsName (also a client certificate) with
// serial, and returns its PEM and its key's.
func (p *testPKI) leaf(t *testing.T, dnsName string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func (p *testPKI) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.cert)
	return pool
}

// putSecret creates or replaces Secret ns/name of cluster r with data.
func putSecret(ctx context.Context, r *framework.RemoteCluster, ns, name string, data map[string][]byte) error {
	cs, err := kubernetes.NewForConfig(r.RESTConfig())
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	cur, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = cur.ResourceVersion
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	return err
}

// tlsGet sends GET https://<sni>/ through addr from pod with cfg (its
// ServerName set to sni) and returns the served certificate's serial and
// the echo's identity.
func tlsGet(ctx context.Context, pod *framework.Pod, addr, sni string, cfg *tls.Config) (serial int64, identity string, err error) {
	cfg = cfg.Clone()
	cfg.ServerName = sni
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, network, _ string) (net.Conn, error) { return pod.Dial(ctx, network, addr) },
		TLSClientConfig: cfg, ForceAttemptHTTP2: false,
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+sni+"/", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		serial = resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if resp.StatusCode != http.StatusOK {
		return serial, "", fmt.Errorf("GET https://%s/ via %s: %d %s", sni, addr, resp.StatusCode, body)
	}
	var reply framework.HTTPEchoReply
	if err := json.Unmarshal(body, &reply); err != nil {
		return serial, "", fmt.Errorf("not an echo reply: %q", body)
	}
	return serial, reply.Identity, nil
}

const ingressGatewayTLS = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tls, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https-echo, protocol: HTTPS}
    hosts: [echo.example.com]
    tls: {mode: SIMPLE, credentialName: echo-cert}
  - port: {number: 443, name: https-mtls, protocol: HTTPS}
    hosts: [mtls.example.com]
    tls: {mode: MUTUAL, credentialName: mtls-cert}
  - port: {number: 443, name: tls-pass, protocol: TLS}
    hosts: [pass.example.com]
    tls: {mode: PASSTHROUGH}
  - port: {number: 8443, name: https-stolen, protocol: HTTPS}
    hosts: [stolen.example.com]
    tls: {mode: SIMPLE, credentialName: demo/stolen-cert}
  - port: {number: 9443, name: https-broken, protocol: HTTPS}
    hosts: [broken.example.com]
    tls: {mode: SIMPLE, credentialName: broken-cert}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: orphan, namespace: istio-ingress}
spec:
  selector: {istio: nowhere}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-tls, namespace: istio-ingress}
spec:
  hosts: [echo.example.com, mtls.example.com, stolen.example.com]
  gateways: [tls]
  http:
  - route: [{destination: {host: echo.demo.svc.cluster.local}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pass, namespace: istio-ingress}
spec:
  hosts: [pass.example.com]
  gateways: [tls]
  tls:
  - match: [{sniHosts: [pass.example.com]}]
    route: [{destination: {host: secure.demo.svc.cluster.local}}]
`

// TestIngressGatewayTLS is the TLS part of issue #29's "Must show": the
// gateway (authenticated to the hub on its TLS port) serves HTTPS with
// the certificate of the Secret its Gateway names by credentialName, read
// in the gateway's own cluster, and the new one after the Secret is
// rotated, without a restart; MUTUAL requires a client certificate of the
// Secret's CA; PASSTHROUGH hands the TLS connection by SNI to a backend
// that terminates it itself; a credential of another namespace is refused
// and counted.
func TestIngressGatewayTLS(t *testing.T) {
	f, net, hub := sidecarFleet(t, 2, "--xds-mtls")
	ctx := t.Context()
	r1, r2 := f.Remote("cluster-1"), f.Remote("cluster-2")
	serverCA, clientCA, passCA := newTestPKI(t, "server CA"), newTestPKI(t, "client CA"), newTestPKI(t, "pass CA")

	// Backends in cluster-2: echo behind a sidecar, and "secure", which
	// terminates TLS itself (no sidecar).
	_, backend := httpEchoSidecar(t, f, net, hub, r2, "echo")
	secure, err := r2.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: "demo", Service: "secure", ServicePort: 9443, PortName: "tls", AppProtocol: "tls",
	})
	if err != nil {
		t.Fatal(err)
	}
	securePod := framework.NewTestPod(t, net, framework.PodOptions{Name: "c2-secure"})
	passCert, passKey := passCA.leaf(t, "pass.example.com", 7)
	kp, err := tls.X509KeyPair(passCert, passKey)
	if err != nil {
		t.Fatal(err)
	}
	secureApp, err := framework.StartHTTPSEcho(ctx, securePod, fmt.Sprintf("%s:%d", securePod.IP(), secure.TargetPort()),
		"cluster-2/secure-0", &tls.Config{Certificates: []tls.Certificate{kp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secureApp.Close() })
	if err := secure.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		ready := true
		es.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{securePod.IP().String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
	}); err != nil {
		t.Fatal(err)
	}

	// The gateway's credentials, in its own namespace of its own cluster.
	if err := r1.EnsureNamespace(ctx, ingressNamespace); err != nil {
		t.Fatal(err)
	}
	echoCert, echoKey := serverCA.leaf(t, "echo.example.com", 100)
	mtlsCert, mtlsKey := serverCA.leaf(t, "mtls.example.com", 200)
	for name, data := range map[string]map[string][]byte{
		"echo-cert": {"tls.crt": echoCert, "tls.key": echoKey},
		"mtls-cert": {"cert": mtlsCert, "key": mtlsKey, "cacert": clientCA.pem},
		// A Secret without a certificate and key.
		"broken-cert": {"ca.crt": serverCA.pem},
	} {
		if err := putSecret(ctx, r1, ingressNamespace, name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Config().ApplyIstio(ctx, ingressGatewayTLS); err != nil {
		t.Fatal(err)
	}
	// The gateway Pod is its Service's endpoint, as Istio's gateway chart
	// deploys it: the registry knows its labels.
	gwSvc, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: ingressNamespace, Service: "ingressgateway", ServicePort: 443, PortName: "https", AppProtocol: "tls",
	})
	if err != nil {
		t.Fatal(err)
	}
	gwPod := framework.NewTestPod(t, net, framework.PodOptions{Name: "gw-1"})
	gw := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r1, Pod: gwPod, Hub: hub, Name: "gw-1", Namespace: ingressNamespace, Workload: gwSvc,
		Labels: map[string]string{"istio": "ingressgateway"}, Gateway: true,
		XDS: framework.SidecarXDSTLS, XDSTLSAddr: hub.CAAddr(),
	})
	waitReady(t, gw, backend)

	client := framework.NewTestPod(t, net, framework.PodOptions{Name: "tls-client"})
	// The Gateway's 443 is the Service's port: the gateway listens on its
	// target port, as istiod binds it.
	addr := fmt.Sprintf("%s:%d", gwPod.IP(), gwSvc.TargetPort())
	trustServer := &tls.Config{RootCAs: serverCA.pool(), MinVersion: tls.VersionTLS12}
	servedBy := func(sni string, cfg *tls.Config, wantSerial int64, wantIdentity string) func() error {
		return func() error {
			serial, id, err := tlsGet(ctx, client, addr, sni, cfg)
			if err != nil {
				return err
			}
			if serial != wantSerial || id != wantIdentity {
				return fmt.Errorf("%s: certificate serial %d answered by %q, want %d by %q", sni, serial, id, wantSerial, wantIdentity)
			}
			return nil
		}
	}
	testutil.Eventually(t, converge, poll, servedBy("echo.example.com", trustServer, 100, "cluster-2/echo-0"))

	// Rotated: the new certificate is served, Envoy not restarted.
	uptime := envoyUptime(t, gw)
	newCert, newKey := serverCA.leaf(t, "echo.example.com", 101)
	if err := putSecret(ctx, r1, ingressNamespace, "echo-cert", map[string][]byte{"tls.crt": newCert, "tls.key": newKey}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, servedBy("echo.example.com", trustServer, 101, "cluster-2/echo-0"))
	if now := envoyUptime(t, gw); now < uptime {
		t.Errorf("Envoy's uptime went from %d s to %d s: it restarted for the rotation", uptime, now)
	}

	// MUTUAL: no client certificate, no answer; one of the client CA's is
	// answered.
	if _, _, err := tlsGet(ctx, client, addr, "mtls.example.com", trustServer); err == nil {
		t.Errorf("MUTUAL answered a client without a certificate")
	}
	cc, ck := clientCA.leaf(t, "client.example.com", 300)
	ckp, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	withCert := trustServer.Clone()
	withCert.Certificates = []tls.Certificate{ckp}
	testutil.Eventually(t, converge, poll, servedBy("mtls.example.com", withCert, 200, "cluster-2/echo-0"))

	// PASSTHROUGH: the backend's own certificate, by SNI.
	testutil.Eventually(t, converge, poll, servedBy("pass.example.com", &tls.Config{RootCAs: passCA.pool()}, 7, "cluster-2/secure-0"))

	// Another namespace's Secret: refused, counted; the rest serves on.
	testutil.Eventually(t, converge, poll, func() error {
		v, err := hub.MetricValue(ctx, "meshfed_xds_credentials_refused_total", `reason="other_namespace"`)
		if err != nil {
			return err
		}
		if v < 1 {
			return fmt.Errorf("no refusal of demo/stolen-cert counted")
		}
		return nil
	})
	if _, _, err := tlsGet(ctx, client, gwPod.IP().String()+":8443", "stolen.example.com", trustServer); err == nil {
		t.Errorf("stolen.example.com was served with a certificate of another namespace")
	}
	if err := servedBy("echo.example.com", trustServer, 101, "cluster-2/echo-0")(); err != nil {
		t.Error(err)
	}

	// What the serving side found is on the Gateways' status: the
	// refused Secret, the Secret without a key; a Gateway whose selector
	// no Pod has.
	for _, want := range []struct{ name, part string }{
		{"tls", "spec.servers[3].tls.credentialName: in cluster cluster-1, namespace istio-ingress: the proxy's namespace is istio-ingress"},
		{"tls", "spec.servers[4].tls.credentialName: in cluster cluster-1, namespace istio-ingress: xdsgen: credential: Secret broken-cert holds neither tls.crt and tls.key nor cert and key"},
		{"orphan", "spec.selector: no Pod of the registry has the labels istio=nowhere"},
	} {
		testutil.Eventually(t, converge, poll, func() error {
			msg, err := reconciledMessage(ctx, f, "Gateway", ingressNamespace, want.name)
			if err != nil {
				return err
			}
			if !strings.Contains(msg, want.part) {
				return fmt.Errorf("Gateway %s's Reconciled message %q lacks %q", want.name, msg, want.part)
			}
			return nil
		})
	}
	if msg, err := reconciledMessage(ctx, f, "Gateway", ingressNamespace, "tls"); err != nil || strings.Contains(msg, "spec.selector") {
		t.Errorf("the served Gateway's message %q %v names its selector", msg, err)
	}
}

// reconciledMessage is the message of the Reconciled condition of the
// networking.istio.io object kind ns/name.
func reconciledMessage(ctx context.Context, f *framework.Fleet, kind, ns, name string) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: kind})
	if err := f.Config().Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return "", err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Reconciled" {
			msg, _ := m["message"].(string)
			return msg, nil
		}
	}
	return "", fmt.Errorf("%s %s/%s has no Reconciled condition", kind, ns, name)
}

// envoyUptime is Envoy's server.uptime in seconds: it starts again from 0
// when pilot-agent restarts Envoy.
func envoyUptime(t *testing.T, s *framework.Sidecar) int {
	t.Helper()
	b, err := s.Admin(t.Context(), "/stats?filter=^server.uptime$")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscanf(string(b), "server.uptime: %d", &n); err != nil {
		t.Fatalf("server.uptime in %q: %v", b, err)
	}
	return n
}
