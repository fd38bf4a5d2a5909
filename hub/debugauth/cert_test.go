package debugauth

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/pki"
)

// TestClientCertificates: over TLS, a mesh client certificate of a listed
// identity reads without a token; one of another identity is refused with
// its name; one that does not chain to the mesh roots is no credential
// (401); a token still works beside them.
func TestClientCertificates(t *testing.T) {
	now := time.Now()
	mesh, err := pki.NewCA("mesh roots", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other roots", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *pki.CA, id string) tls.Certificate {
		t.Helper()
		u, _ := url.Parse(id)
		certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{URIs: []*url.URL{u}, Validity: time.Hour, Client: true, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	serverPEM, serverKey, err := mesh.Issue(pki.IssueOptions{IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour, Server: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(serverPEM, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{Reviewer: &fakeReviewer{}, Clock: clock.RealClock{}, Log: logr.Discard(), Metrics: prometheus.NewRegistry(),
		Identities: []string{"spiffe://cluster.local/ns/ops/sa/prober"}, Roots: func() []byte { return mesh.CertPEM }})
	srv := httptest.NewUnstartedServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the mesh")) })))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mesh.CertPEM)
	get := func(cert *tls.Certificate, token string) int {
		t.Helper()
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/debug/registryz", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	listed, unlisted, foreign := issue(mesh, "spiffe://cluster.local/ns/ops/sa/prober"), issue(mesh, "spiffe://cluster.local/ns/demo/sa/echo"), issue(other, "spiffe://cluster.local/ns/ops/sa/prober")
	for name, tc := range map[string]struct {
		cert  *tls.Certificate
		token string
		want  int
	}{
		"listed identity":          {&listed, "", http.StatusOK},
		"unlisted identity":        {&unlisted, "", http.StatusForbidden},
		"unlisted identity, token": {&unlisted, "reader", http.StatusOK},
		"not of the mesh":          {&foreign, "", http.StatusUnauthorized},
		"no certificate, no token": {nil, "", http.StatusUnauthorized},
		"no certificate, a token":  {nil, "reader", http.StatusOK},
	} {
		if got := get(tc.cert, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}
