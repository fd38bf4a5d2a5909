package podagent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/meshfed/meshfed/spoke/podagent"
)

// hangGuard bounds waits that only a bug makes long.
const hangGuard = 30 * time.Second

// podFiles lays out a Pod's mounts in a temporary directory: a token, the
// CA roots (a real self-signed CA certificate) and the labels; it returns
// Options for a Pod whose CA refuses connections.
func podFiles(t *testing.T) podagent.Options {
	t.Helper()
	root := t.TempDir()
	o := podOptions()
	o.Log = testr.New(t)
	o.CAAddress = "127.0.0.1:1" // nothing listens: no certificate comes
	o.DiscoveryAddress = "127.0.0.1:1"
	o.TokenFile = filepath.Join(root, "tokens", "istio-token")
	o.CARootsFile = filepath.Join(root, "istio", "root-cert.pem")
	o.LabelsFile = filepath.Join(root, "pod", "labels")
	o.CertDir = filepath.Join(root, "data")
	o.BootstrapPath = filepath.Join(root, "proxy", "grpc-bootstrap.json")
	write(t, o.TokenFile, []byte("a-token"))
	write(t, o.CARootsFile, selfSignedPEM(t))
	write(t, o.LabelsFile, []byte("app=\"client\"\nistio-locality=\"r1.z1\""))
	return o
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test root"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestRunNotReadyBeforeFirstCertificate runs the agent against a CA that
// refuses connections: the readiness endpoint answers 503 with the reason,
// no bootstrap is written, and Run returns nil once ctx ends.
func TestRunNotReadyBeforeFirstCertificate(t *testing.T) {
	opts := podFiles(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = ln
	url := "http://" + ln.Addr().String() + podagent.ReadyPath

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- podagent.Run(ctx, opts) }()

	// The listener exists before Run starts: the request waits for the
	// server rather than failing.
	client := &http.Client{Timeout: hangGuard}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET %s: %s, want 503 before the first certificate", podagent.ReadyPath, resp.Status)
	}
	if !strings.Contains(string(body), "waiting for the first certificate") {
		t.Errorf("GET %s: body %q does not give the reason", podagent.ReadyPath, body)
	}
	resp, err = client.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %s, want 405", podagent.ReadyPath, resp.Status)
	}
	if _, err := os.Stat(opts.BootstrapPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bootstrap written before the first certificate (stat: %v)", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v when ctx ended, want nil", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Run did not return after ctx ended")
	}
	if _, err := client.Get(url); err == nil {
		t.Error("the readiness server still answers after Run returned")
	}
}

func TestRunInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		field  string
		change func(*podagent.Options)
	}{
		{"DiscoveryAddress", func(o *podagent.Options) { o.DiscoveryAddress = "no-port" }},
		{"CAAddress", func(o *podagent.Options) { o.CAAddress = "" }},
		{"CARootsFile", func(o *podagent.Options) { o.CARootsFile = "" }},
		{"TokenFile", func(o *podagent.Options) { o.TokenFile = "" }},
		{"CertDir", func(o *podagent.Options) { o.CertDir = "" }},
		{"BootstrapPath", func(o *podagent.Options) { o.BootstrapPath = "" }},
		{"PodName", func(o *podagent.Options) { o.PodName = "" }},
		{"PodNamespace", func(o *podagent.Options) { o.PodNamespace = "" }},
		{"InstanceIP", func(o *podagent.Options) { o.InstanceIP = "" }},
		{"InstanceIP", func(o *podagent.Options) { o.InstanceIP = "10.0.0" }},
		{"ServiceAccount", func(o *podagent.Options) { o.ServiceAccount = "" }},
		{"ClusterID", func(o *podagent.Options) { o.ClusterID = "" }},
		{"CertTTL", func(o *podagent.Options) { o.CertTTL = -time.Hour }},
		{"CertRefreshInterval", func(o *podagent.Options) { o.CertRefreshInterval = -time.Second }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			opts := podFiles(t)
			tc.change(&opts)
			err := podagent.Run(t.Context(), opts)
			if !errors.Is(err, podagent.ErrInvalidOptions) {
				t.Fatalf("Run: %v, want ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// TestRunBadFiles: the CA roots and the labels are read before anything
// starts, and an error names the file (or line).
func TestRunBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*testing.T, *podagent.Options)
		wantErr []string
	}{
		{"no CA roots", func(t *testing.T, o *podagent.Options) {
			o.CARootsFile = filepath.Join(t.TempDir(), "absent.pem")
		}, []string{"absent.pem"}},
		{"CA roots not PEM", func(t *testing.T, o *podagent.Options) {
			write(t, o.CARootsFile, []byte("not a certificate"))
		}, []string{"root-cert.pem", "no PEM certificate"}},
		{"malformed labels", func(t *testing.T, o *podagent.Options) {
			write(t, o.LabelsFile, []byte("app=\"client\"\nbroken"))
		}, []string{"labels", "line 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := podFiles(t)
			tc.change(t, &opts)
			err := podagent.Run(t.Context(), opts)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestRunWithoutLabelsFile: a Pod without the labels file is no error.
func TestRunWithoutLabelsFile(t *testing.T) {
	opts := podFiles(t)
	opts.LabelsFile = filepath.Join(t.TempDir(), "absent")
	opts.ReadyAddr = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := podagent.Run(ctx, opts); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
