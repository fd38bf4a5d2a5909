package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/model"
)

// The remote clusters of these tests: two real kube-apiservers, each with
// its own service-account signing key, started once for the package (on
// first use, so unit tests and fuzzing do not pay for them) and stopped by
// TestMain.
var (
	fleetOnce sync.Once
	fleetVal  *fleet
	fleetErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fleetVal != nil {
		fleetVal.stop()
	}
	os.Exit(code)
}

// remoteCluster is one workload cluster: an apiserver and admin clients.
type remoteCluster struct {
	id   model.ClusterID
	env  *envtest.Environment
	cfg  *rest.Config
	kube kubernetes.Interface
	ctrl client.WithWatch
}

// fleet is the two remote clusters; cluster-1 is also the config cluster.
type fleet struct {
	clusters []*remoteCluster
}

func (f *fleet) stop() {
	for _, c := range f.clusters {
		_ = c.env.Stop()
	}
}

// ClusterConfig implements ca.ClusterConfigs, as remotes.Provider does.
func (f *fleet) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	for _, c := range f.clusters {
		if c.id == id {
			return c.cfg, true
		}
	}
	return nil, false
}

func (f *fleet) cluster(id model.ClusterID) *remoteCluster {
	for _, c := range f.clusters {
		if c.id == id {
			return c
		}
	}
	panic("no cluster " + id)
}

// startFleet returns the shared fleet, starting it on first use.
func startFleet(tb testing.TB) *fleet {
	tb.Helper()
	fleetOnce.Do(func() { fleetVal, fleetErr = newFleet() })
	if fleetErr != nil {
		tb.Fatal(fleetErr)
	}
	return fleetVal
}

func newFleet() (*fleet, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make test-unit` (it builds the kube-apiserver and etcd first)")
	}
	scheme := kruntime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	f := &fleet{}
	for _, id := range []model.ClusterID{"cluster-1", "cluster-2"} {
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		cfg, err := env.Start()
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("starting apiserver of %s: %w", id, err)
		}
		c := &remoteCluster{id: id, env: env, cfg: cfg}
		f.clusters = append(f.clusters, c)
		if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
			f.stop()
			return nil, err
		}
		if c.ctrl, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
			f.stop()
			return nil, err
		}
		// The same namespace and service account in both clusters, so a
		// token refused by the other cluster is refused for its issuer,
		// not for a missing account.
		ctx := context.Background()
		for _, o := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo"}},
		} {
			if err := c.ctrl.Create(ctx, o); err != nil {
				f.stop()
				return nil, fmt.Errorf("%s: creating %s: %w", id, o.GetName(), err)
			}
		}
	}
	return f, nil
}

// token asks cluster c for a token of service account ns/sa, valid ten
// minutes (the apiserver's minimum) for audiences, bound to obj if given.
func (c *remoteCluster) token(tb testing.TB, ns, sa string, audiences []string, bound *authenticationv1.BoundObjectReference) string {
	tb.Helper()
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    bound,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("token for %s/%s in %s: %v", ns, sa, c.id, err)
	}
	return tr.Status.Token
}

// caServer is a running CA: Keys from the config cluster, an Authenticator
// over the fleet, a Server on a loopback port, and a TLS client to it.
type caServer struct {
	keys   *ca.Keys
	authn  *ca.Authenticator
	server *ca.Server
	reg    *prometheus.Registry
	conn   *grpc.ClientConn
	client pb.IstioCertificateServiceClient
}

type caConfig struct {
	authn  ca.AuthenticatorOptions
	server ca.ServerOptions
}

// startCA runs a CA over the fleet for the duration of the test.
func startCA(tb testing.TB, f *fleet, cfg caConfig) *caServer {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	keys, err := ca.LoadOrCreateKeys(ctx, f.cluster("cluster-1").ctrl, "istio-system", time.Now(), ca.KeyOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if cfg.authn.Clusters == nil {
		cfg.authn.Clusters = f
	}
	cfg.authn.Metrics = reg
	authn, err := ca.NewAuthenticator(cfg.authn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.server.Keys, cfg.server.Authenticator, cfg.server.Metrics = keys, authn, reg
	srv, err := ca.NewServer(cfg.server)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(
		credentials.NewTLS(&tls.Config{RootCAs: keys.Roots(), MinVersion: tls.VersionTLS12})))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return &caServer{keys: keys, authn: authn, server: srv, reg: reg, conn: conn,
		client: pb.NewIstioCertificateServiceClient(conn)}
}

// request sends CreateCertificate with the given credentials; an empty
// cluster or token leaves that metadata out.
func (s *caServer) request(ctx context.Context, cluster model.ClusterID, token string, csrPEM []byte, ttl time.Duration) (*pb.IstioCertificateResponse, error) {
	var kv []string
	if cluster != "" {
		kv = append(kv, "ClusterID", string(cluster))
	}
	if token != "" {
		kv = append(kv, "authorization", "Bearer "+token)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	return s.client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csrPEM), ValidityDuration: int64(ttl / time.Second)})
}

// newCSR makes a key and a CSR claiming the given SANs.
func newCSR(tb testing.TB, uris []string, dns []string) ([]byte, *ecdsa.PrivateKey) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "workload"}, DNSNames: dns}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

// parseChain parses a response's chain: the leaf, the intermediates and a
// pool of the roots (the last element).
func parseChain(tb testing.TB, chain []string) (*x509.Certificate, *x509.CertPool, *x509.CertPool) {
	tb.Helper()
	if len(chain) < 2 {
		tb.Fatalf("chain of %d elements, want leaf ... root", len(chain))
	}
	parse := func(s string) []*x509.Certificate {
		var out []*x509.Certificate
		rest := []byte(s)
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, c)
		}
		if len(out) == 0 {
			tb.Fatalf("no certificate in %q", s)
		}
		return out
	}
	leaf := parse(chain[0])
	if len(leaf) != 1 {
		tb.Fatalf("first element holds %d certificates, want the leaf alone", len(leaf))
	}
	mid, roots := x509.NewCertPool(), x509.NewCertPool()
	for _, s := range chain[1 : len(chain)-1] {
		for _, c := range parse(s) {
			mid.AddCert(c)
		}
	}
	for _, c := range parse(chain[len(chain)-1]) {
		roots.AddCert(c)
	}
	return leaf[0], mid, roots
}
