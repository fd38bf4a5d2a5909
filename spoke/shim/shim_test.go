package shim_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/pkg/pki"
	meshtest "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/trustapi"
	"github.com/meshfed/meshfed/spoke/shim"
)

// --- a fake hub: an in-memory bundle behind the real wire contract ---

type fakeHub struct {
	token, cluster string

	mu      sync.Mutex
	bundle  trustapi.Bundle
	wake    chan struct{}
	version string // last x-meshfed-spoke-version seen
}

func newFakeHub(token, cluster string, roots ...trustapi.Root) *fakeHub {
	return &fakeHub{token: token, cluster: cluster, bundle: trustapi.NewBundle(roots), wake: make(chan struct{})}
}

func (h *fakeHub) set(roots ...trustapi.Root) {
	h.mu.Lock()
	h.bundle = trustapi.NewBundle(roots)
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

func (h *fakeHub) Watch(_ *wrapperspb.BytesValue, st grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+h.token {
		return status.Error(codes.Unauthenticated, "bad token")
	}
	if got := md.Get("clusterid"); len(got) != 1 || got[0] != h.cluster {
		return status.Error(codes.Unauthenticated, "bad cluster")
	}
	if got := md.Get(trustapi.MetadataClient); len(got) != 1 || got[0] != trustapi.ClientSpoke {
		return status.Errorf(codes.InvalidArgument, "%s %q, want %q", trustapi.MetadataClient, got, trustapi.ClientSpoke)
	}
	h.mu.Lock()
	if v := md.Get(trustapi.MetadataSpokeVersion); len(v) > 0 {
		h.version = v[0]
	}
	h.mu.Unlock()
	for {
		h.mu.Lock()
		b, wake := h.bundle, h.wake
		h.mu.Unlock()
		m, err := trustapi.Encode(b)
		if err != nil {
			return err
		}
		if err := st.Send(m); err != nil {
			return err
		}
		select {
		case <-st.Context().Done():
			return nil
		case <-wake:
		}
	}
}

// serve serves h over TLS on addr ("127.0.0.1:0" for any port).
func serve(t *testing.T, h *fakeHub, cert tls.Certificate, addr string) (*grpc.Server, string) {
	t.Helper()
	var lis net.Listener
	// The port of a stopped server may take a moment to free.
	if err := meshtest.Poll(t.Context(), 5*time.Second, 100*time.Millisecond, func() (err error) {
		lis, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	trustapi.RegisterTrustBundleServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv, lis.Addr().String()
}

// --- certificates ---

func newRoot(t *testing.T, td pki.TrustDomain) trustapi.Root {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{Organization: []string{td.String()}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return trustapi.Root{TrustDomain: td, Fingerprint: hex.EncodeToString(sum[:]),
		PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

func servingCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// --- the workload cluster ---

func startAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(meshtest.StartAPIServer(t, &envtest.Environment{}))
}

func createNS(t *testing.T, kc kubernetes.Interface, name string, lbl map[string]string) {
	t.Helper()
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	meshtest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

func wantPEM(roots ...trustapi.Root) string { return string(trustapi.NewBundle(roots).PEM()) }

// hasBundle checks istio-ca-root-cert of every namespace in nss.
func hasBundle(ctx context.Context, kc kubernetes.Interface, want string, nss ...string) error {
	for _, ns := range nss {
		cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, shim.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data[shim.ConfigMapKey] != want {
			return fmt.Errorf("%s: root-cert.pem has %d certificates, want %d", ns,
				strings.Count(cm.Data[shim.ConfigMapKey], "BEGIN CERTIFICATE"), strings.Count(want, "BEGIN CERTIFICATE"))
		}
		if cm.Labels[shim.LabelIstioConfig] != "true" {
			return fmt.Errorf("%s: label %s missing", ns, shim.LabelIstioConfig)
		}
	}
	return nil
}

func runShim(t *testing.T, opts shim.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shim.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shim.Run: %v", err)
		}
	})
}

// TestShim: the bundle reaches every namespace but the system ones; a
// deleted or edited ConfigMap comes back; a new namespace gets it; a
// changed bundle reaches every namespace; with the hub down, nothing is
// deleted and new namespaces still get the last bundle; after the hub
// returns, its new bundle arrives.
func TestShim(t *testing.T) {
	kc := startAPIServer(t)
	ctx := t.Context()
	for _, ns := range []string{"a", "b"} {
		createNS(t, kc, ns, nil)
	}
	r1, r2, r3 := newRoot(t, "cluster.local"), newRoot(t, "other.example"), newRoot(t, "third.example")
	hub := newFakeHub("tok", "cluster-1", r1)
	cert, pool := servingCert(t)
	srv, addr := serve(t, hub, cert, "127.0.0.1:0")

	reg := prometheus.NewRegistry()
	opts := shim.DefaultOptions()
	opts.HubAddr, opts.HubRoots, opts.ServerName, opts.ClusterID = addr, pool, "localhost", "cluster-1"
	opts.TokenFunc = func(context.Context) (string, error) { return "tok", nil }
	opts.Client, opts.Version, opts.Metrics = kc, "v-test", reg
	opts.MinBackoff, opts.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	runShim(t, opts)

	all := []string{"default", "a", "b"}
	eventually(t, "first bundle in every namespace", func() error { return hasBundle(ctx, kc, wantPEM(r1), all...) })
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		if _, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, shim.ConfigMapName, metav1.GetOptions{}); err == nil {
			t.Errorf("%s got the ConfigMap", ns)
		}
	}
	hub.mu.Lock()
	if hub.version != "v-test" {
		t.Errorf("spoke version at the hub = %q", hub.version)
	}
	hub.mu.Unlock()

	// Deleted → back; edited → restored.
	if err := kc.CoreV1().ConfigMaps("a").Delete(ctx, shim.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := kc.CoreV1().ConfigMaps("b").Get(ctx, shim.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[shim.ConfigMapKey] = "garbage"
	if _, err := kc.CoreV1().ConfigMaps("b").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted and edited ConfigMaps restored", func() error { return hasBundle(ctx, kc, wantPEM(r1), "a", "b") })

	// A new namespace gets it.
	createNS(t, kc, "c", nil)
	all = append(all, "c")
	eventually(t, "new namespace", func() error { return hasBundle(ctx, kc, wantPEM(r1), "c") })

	// A second root reaches every namespace.
	hub.set(r1, r2)
	eventually(t, "second root everywhere", func() error { return hasBundle(ctx, kc, wantPEM(r1, r2), all...) })

	// Hub down: nothing deleted, and a new namespace gets the last bundle.
	srv.Stop()
	createNS(t, kc, "d", nil)
	all = append(all, "d")
	eventually(t, "new namespace while the hub is down", func() error { return hasBundle(ctx, kc, wantPEM(r1, r2), all...) })
	if err := kc.CoreV1().ConfigMaps("a").Delete(ctx, shim.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted ConfigMap restored while the hub is down", func() error { return hasBundle(ctx, kc, wantPEM(r1, r2), "a") })

	// The hub returns at the same address with a new bundle.
	hub.set(r1, r2, r3)
	serve(t, hub, cert, addr)
	eventually(t, "bundle after reconnect", func() error { return hasBundle(ctx, kc, wantPEM(r1, r2, r3), all...) })

	if n := testutil.ToFloat64(counter(t, reg, "meshfed_spoke_root_cert_writes_total", "created")); n < 5 {
		t.Errorf("created writes = %v, want at least 5", n)
	}
	if n := testutil.ToFloat64(counter(t, reg, "meshfed_spoke_root_cert_writes_total", "updated")); n < 5 {
		t.Errorf("updated writes = %v, want at least 5", n)
	}
}

// TestShimSelector: with a namespace selector only the selected namespaces
// get the ConfigMap, including one labelled later; a wrong token writes
// nothing.
func TestShimSelector(t *testing.T) {
	kc := startAPIServer(t)
	ctx := t.Context()
	createNS(t, kc, "mesh", map[string]string{"istio-injection": "enabled"})
	createNS(t, kc, "plain", nil)
	r1 := newRoot(t, "cluster.local")
	hub := newFakeHub("tok", "cluster-1", r1)
	cert, pool := servingCert(t)
	_, addr := serve(t, hub, cert, "127.0.0.1:0")

	opts := shim.DefaultOptions()
	opts.HubAddr, opts.HubRoots, opts.ServerName, opts.ClusterID = addr, pool, "localhost", "cluster-1"
	opts.TokenFunc = func(context.Context) (string, error) { return "tok", nil }
	opts.Client = kc
	opts.NamespaceSelector = labels.SelectorFromSet(labels.Set{"istio-injection": "enabled"})
	runShim(t, opts)

	eventually(t, "selected namespace", func() error { return hasBundle(ctx, kc, wantPEM(r1), "mesh") })
	if _, err := kc.CoreV1().ConfigMaps("plain").Get(ctx, shim.ConfigMapName, metav1.GetOptions{}); err == nil {
		t.Error("unselected namespace got the ConfigMap")
	}
	ns, err := kc.CoreV1().Namespaces().Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"istio-injection": "enabled"}
	if _, err := kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace labelled later", func() error { return hasBundle(ctx, kc, wantPEM(r1), "plain") })

	// A second shim with a wrong token never writes: a new namespace is
	// left to the first shim only, so check the refused shim's metrics.
	reg := prometheus.NewRegistry()
	bad := opts
	bad.TokenFunc = func(context.Context) (string, error) { return "wrong", nil }
	bad.Metrics = reg
	bad.NamespaceSelector = labels.SelectorFromSet(labels.Set{"team": "x"})
	createNS(t, kc, "x", map[string]string{"team": "x"})
	runShim(t, bad)
	meshtest.Consistently(t, time.Second, 50*time.Millisecond, func() error {
		if _, err := kc.CoreV1().ConfigMaps("x").Get(ctx, shim.ConfigMapName, metav1.GetOptions{}); err == nil {
			return errors.New("a shim refused by the hub wrote a ConfigMap")
		}
		return nil
	})
}

func counter(t *testing.T, g prometheus.Gatherer, name, result string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
}
