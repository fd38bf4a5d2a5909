package spoke

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually calls cond every 20 ms until it returns nil, failing the test
// with cond's last error after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	testutil.Eventually(t, timeout, 20*time.Millisecond, cond)
}

// TestRunDevCert runs the spoke with a development certificate against an
// apiserver that is not there: it serves health, metrics and answers
// malformed reviews, and is not ready (no injection configuration).
// Injection against a real apiserver is in e2e/spoke_test.go.
func TestRunDevCert(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	opts := DefaultOptions()
	opts.ListenAddr = addr
	opts.DevCAFile = filepath.Join(dir, "ca.pem")
	opts.RESTConfig = &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}
	opts.Log = testr.New(t)
	opts.Metrics = prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()

	var client *http.Client
	eventually(t, 30*time.Second, func() error {
		caPEM, err := os.ReadFile(opts.DevCAFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := client.Get("https://" + addr + PathHealthz)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	get := func(path string) (int, string) {
		resp, err := client.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(PathReadyz); code != http.StatusServiceUnavailable || !strings.Contains(body, "no injection configuration loaded from ConfigMap istio-system/istio-sidecar-injector") {
		t.Errorf("readyz: %d %q", code, body)
	}
	resp, err := client.Post("https://"+addr+PathInject, "application/json", strings.NewReader(`{"kind":`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed review: HTTP %d", resp.StatusCode)
	}
	if code, body := get(PathMetrics); code != 200 ||
		!strings.Contains(body, `meshfed_spoke_webhook_requests_total{result="error",webhook="inject"} 1`) ||
		!strings.Contains(body, "meshfed_spoke_webhook_duration_seconds_bucket") {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, mut := range []func(*Options){
		func(o *Options) { o.ListenAddr = "" },
		func(o *Options) { o.InjectConfigMap.Name = "" },
		func(o *Options) { o.CertFile = "/x.pem" },
	} {
		o := DefaultOptions()
		mut(&o)
		if err := Run(t.Context(), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := ParseConfigMapRef("istio-system"); err == nil {
		t.Error("ParseConfigMapRef accepted a name without namespace")
	}
	if r, err := ParseConfigMapRef("ns/name"); err != nil || r != (ConfigMapRef{"ns", "name"}) {
		t.Errorf("ParseConfigMapRef: %v %v", r, err)
	}
}

func TestFileCertReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, err := pki.NewCA("test", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write := func(cn string, mod time.Time) {
		c, k, err := ca.Issue(pki.IssueOptions{CommonName: cn, DNSNames: []string{cn}, Validity: time.Hour, Server: true, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string][]byte{certFile: c, keyFile: k} {
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(f, mod, mod); err != nil {
				t.Fatal(err)
			}
		}
	}
	cn := func(c *tls.Certificate) string {
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.Subject.CommonName
	}
	base := time.Now().Add(-time.Hour)
	write("first", base)
	fc, err := newFileCert(certFile, keyFile, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	write("second", base.Add(time.Minute))
	if c, err := fc.GetCertificate(nil); err != nil || cn(c) != "second" {
		t.Fatalf("after rotation: %v", err)
	}
	// A broken rotation keeps the last good certificate.
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := fc.GetCertificate(nil); err != nil || cn(c) != "second" {
		t.Fatalf("after broken rotation: %v", err)
	}
	if _, err := newFileCert(certFile, keyFile, testr.New(t)); err == nil {
		t.Error("a broken certificate was loaded at start")
	}
}
