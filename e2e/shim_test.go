package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/replication"
	"github.com/meshfed/meshfed/hub/trustsvc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/trustapi"
	"github.com/meshfed/meshfed/spoke/shim"
)

// The spoke's own service account, as the spoke chart installs it.
const shimServiceAccount = "meshfed-spoke"

// shimTokenFunc returns a TokenFunc that requests a fresh istio-ca token of
// istio-system/meshfed-spoke from cluster r on every call, as a projected
// token file would give.
func shimTokenFunc(t *testing.T, r *framework.RemoteCluster) func(context.Context) (string, error) {
	t.Helper()
	_ = serviceAccountToken(t, r, spokeNamespace, shimServiceAccount, "istio-ca") // creates the account
	cs, err := kubernetes.NewForConfig(r.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) (string, error) {
		ttl := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(spokeNamespace).CreateToken(ctx, shimServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &ttl},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return tr.Status.Token, nil
	}
}

// runTestShim runs shim.Run in this process until the test ends.
// testShimOptions are the options of cluster r's shim (version "e2e"),
// streaming from the hub CA at hubAddr verified with pool, with a real token
// of r's spoke service account.
func testShimOptions(t *testing.T, r *framework.RemoteCluster, hubAddr string, pool *x509.CertPool) shim.Options {
	t.Helper()
	opts := shim.DefaultOptions()
	opts.HubAddr, opts.HubRoots, opts.ServerName, opts.ClusterID = hubAddr, pool, "localhost", string(r.ID)
	opts.TokenFunc, opts.Client, opts.Version = shimTokenFunc(t, r), kubernetes.NewForConfigOrDie(r.RESTConfig()), "e2e"
	opts.Log, opts.Metrics = testr.New(t).WithName("shim"), prometheus.NewRegistry()
	return opts
}

func runTestShim(t *testing.T, opts shim.Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- shim.Run(ctx, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("shim.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// shimHasBundle checks that istio-ca-root-cert of each namespace holds
// exactly the certificates of wantPEM (in any order).
func shimHasBundle(ctx context.Context, kc kubernetes.Interface, wantPEM []string, nss ...string) error {
	for _, ns := range nss {
		cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, shim.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := cm.Data[shim.ConfigMapKey]
		if n := strings.Count(got, "BEGIN CERTIFICATE"); n != len(wantPEM) {
			return fmt.Errorf("%s: %d certificates in %s, want %d", ns, n, shim.ConfigMapKey, len(wantPEM))
		}
		for _, p := range wantPEM {
			if !strings.Contains(got, strings.TrimSpace(p)) {
				return fmt.Errorf("%s: a root of the hub's bundle is missing", ns)
			}
		}
		if cm.Labels[shim.LabelIstioConfig] != "true" {
			return fmt.Errorf("%s: label %s missing", ns, shim.LabelIstioConfig)
		}
	}
	return nil
}

// shimScenario is the part shared by both tests: namespaces appear with
// the bundle; a deleted ConfigMap returns; a new namespace gets it; then
// addRoot adds a second root, which must reach every namespace.
func shimScenario(t *testing.T, kc kubernetes.Interface, bundle func() ([]string, error), addRoot func()) {
	t.Helper()
	ctx := t.Context()
	nss := []string{"default", spokeNamespace, "shop", "billing"}
	for _, ns := range nss {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil &&
			!strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	want, err := bundle()
	if err != nil || len(want) == 0 {
		t.Fatalf("hub bundle: %v (%d roots)", err, len(want))
	}
	testutil.Eventually(t, converge, poll, func() error { return shimHasBundle(ctx, kc, want, nss...) })
	if _, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, shim.ConfigMapName, metav1.GetOptions{}); err == nil {
		t.Error("kube-system got istio-ca-root-cert")
	}

	if err := kc.CoreV1().ConfigMaps("shop").Delete(ctx, shim.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error { return shimHasBundle(ctx, kc, want, "shop") })

	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "newcomer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nss = append(nss, "newcomer")
	testutil.Eventually(t, converge, poll, func() error { return shimHasBundle(ctx, kc, want, "newcomer") })

	addRoot()
	testutil.Eventually(t, converge, poll, func() error {
		w, err := bundle()
		if err != nil {
			return err
		}
		if len(w) < 2 {
			return fmt.Errorf("hub bundle has %d roots, want 2", len(w))
		}
		return shimHasBundle(ctx, kc, w, nss...)
	})
}

// TestShimTrustBundle: the spoke shim, run against cluster-1 with a real
// token of cluster-1's meshfed-spoke service account, watches the trust
// bundle of a hub process (its CA address, verified with the hub's root)
// and keeps istio-ca-root-cert in every namespace. A second hub replica
// with its own config-cluster namespace, hence its own CA root, joins the
// federation: its root reaches every namespace through the first hub.
//
// Needs hub/trustsvc served on the hub's CA port (see hub wiring).
func TestShimTrustBundle(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	h0 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key})
	r := f.Remotes()[0]

	bundle := func() ([]string, error) {
		tz, err := h0.Trustz(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, root := range tz.Roots {
			out = append(out, root.PEM)
		}
		return out, nil
	}
	roots, err := bundle()
	if err != nil || len(roots) == 0 {
		t.Fatalf("trustz: %v (%d roots)", err, len(roots))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(strings.Join(roots, ""))) {
		t.Fatal("trustz: no certificate")
	}
	tokens := shimTokenFunc(t, r)

	// Fail fast, with a clear message, when the hub does not serve the
	// trust-bundle service.
	cc, err := grpc.NewClient(h0.CAAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tok, err := tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	probeCtx, cancelProbe := context.WithTimeout(ctx, converge)
	st, err := trustapi.Watch(metadata.AppendToOutgoingContext(probeCtx,
		trustapi.MetadataAuthorization, "Bearer "+tok, trustapi.MetadataClusterID, string(r.ID)), cc)
	if err == nil {
		_, err = st.Recv()
	}
	cancelProbe()
	if status.Code(err) == codes.Unimplemented {
		t.Fatalf("the hub does not serve %s on its CA port: wire hub/trustsvc into hub.Run: %v", trustapi.ServiceName, err)
	} else if err != nil {
		t.Fatalf("probe Watch: %v", err)
	}
	// A token claimed for another cluster is refused.
	st, err = trustapi.Watch(metadata.AppendToOutgoingContext(ctx,
		trustapi.MetadataAuthorization, "Bearer "+tok, trustapi.MetadataClusterID, "cluster-nope"), cc)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch as an unknown cluster: %v, want Unauthenticated", err)
	}

	opts := testShimOptions(t, r, h0.CAAddr(), pool)
	opts.TokenFunc = tokens
	runTestShim(t, opts)

	// The hub shows the spoke's version and health in remote-clusters.
	testutil.Eventually(t, converge, poll, func() error {
		out, err := framework.Meshfedctl(t, "remote-clusters", "--monitoring", strings.TrimPrefix(h0.MonitoringURL(), "http://"))
		if err != nil {
			return err
		}
		if !strings.Contains(out, "e2e (healthy via "+h0.ReplicaID()+")") {
			return fmt.Errorf("remote-clusters shows no healthy spoke:\n%s", out)
		}
		return nil
	})

	shimScenario(t, opts.Client, bundle, func() {
		// Another config-cluster namespace means another CA Secret, so
		// another root, federated into h0's bundle by the replicas' peer
		// stream. The peer CA is shared so that the replicas trust each
		// other.
		if err := f.Config().EnsureNamespace(ctx, "meshfed-b"); err != nil {
			t.Fatal(err)
		}
		cfg := kubernetes.NewForConfigOrDie(f.Config().RESTConfig())
		peerCA, err := cfg.CoreV1().Secrets(spokeNamespace).Get(ctx, replication.PeerCASecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.CoreV1().Secrets("meshfed-b").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: peerCA.Name, Namespace: "meshfed-b"},
			Type:       peerCA.Type, Data: peerCA.Data,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.StartTestHub(t, f, framework.HubOptions{
			GossipKeyFile: key, Join: []*framework.Hub{h0}, Args: []string{"--namespace=meshfed-b"},
		})
	})
}

// TestSpokeStatusFleetWide: the spoke's trust-bundle stream is held by one
// replica, and every replica reports it in remote-clusters — healthy, with
// the replica holding it, and down once the spoke is gone.
func TestSpokeStatusFleetWide(t *testing.T) {
	f, hubs, _, _ := gossipFleet(t, framework.Remotes(1), 0, 2)
	h0, h1 := hubs[0], hubs[1]
	r := f.Remotes()[0]
	_, pool := waitTrustBundle(t, h0)
	stop := runTestShim(t, testShimOptions(t, r, h0.CAAddr(), pool))

	spokeOf := func(h *framework.Hub) string {
		out, err := framework.Meshfedctl(t, "remote-clusters", "--monitoring", strings.TrimPrefix(h.MonitoringURL(), "http://"))
		if err != nil {
			return err.Error()
		}
		return out
	}
	want := "e2e (healthy via " + h0.ReplicaID() + ")"
	testutil.Eventually(t, converge, poll, func() error {
		for _, h := range []*framework.Hub{h0, h1} {
			if out := spokeOf(h); !strings.Contains(out, want) {
				return fmt.Errorf("%s does not show %q:\n%s", h.ReplicaID(), want, out)
			}
		}
		return nil
	})
	stop()
	testutil.Eventually(t, converge, poll, func() error {
		if out := spokeOf(h1); !strings.Contains(out, "e2e (down)") {
			return fmt.Errorf("%s does not show the spoke down:\n%s", h1.ReplicaID(), out)
		}
		return nil
	})
}

// shimClusters is ca.ClusterConfigs over the remote secrets' credentials.
type shimClusters map[model.ClusterID]*rest.Config

func (c shimClusters) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	cfg, ok := c[id]
	return cfg, ok
}

// TestShimTrustBundleInProcess is TestShimTrustBundle with hub/trustsvc in
// this process, not in a hub: the real ca.Authenticator reviewing the real
// token against cluster-1 with the hub's kubeconfig of it, over TLS, and
// an in-memory bundle to which a second root is added.
func TestShimTrustBundleInProcess(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx := t.Context()
	r := f.Remotes()[0]
	hubCfg, err := clientcmd.RESTConfigFromKubeConfig(r.HubKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	authn, err := ca.NewAuthenticator(ca.AuthenticatorOptions{Clusters: shimClusters{r.ID: hubCfg}})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	roots := []federation.Root{shimRoot(t, "cluster.local")}
	changed := make(chan struct{}, 1)
	svc, err := trustsvc.New(trustsvc.Options{
		Authenticator: authn, Changed: changed, Log: testr.New(t).WithName("trustsvc"),
		Roots: func() []federation.Root { mu.Lock(); defer mu.Unlock(); return roots },
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, pool := shimServingCert(t)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = srv.Serve(lis) }()
	go func() { _ = svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); srv.Stop() })

	opts := testShimOptions(t, r, lis.Addr().String(), pool)
	runTestShim(t, opts)

	bundle := func() ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, r := range roots {
			out = append(out, string(r.PEM))
		}
		return out, nil
	}
	shimScenario(t, opts.Client, bundle, func() {
		mu.Lock()
		roots = append(roots, shimRoot(t, "other.example"))
		mu.Unlock()
		changed <- struct{}{}
	})

	sp := svc.Spokes()
	if len(sp) != 1 || sp[0].Cluster != r.ID || sp[0].Version != "e2e" || !sp[0].Healthy ||
		sp[0].Identity != fmt.Sprintf("%s/%s/%s", r.ID, spokeNamespace, shimServiceAccount) {
		t.Errorf("Spokes() = %+v", sp)
	}
}

func shimRoot(t *testing.T, td string) federation.Root {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{Organization: []string{td}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := federation.ParseRootPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pki.TrustDomain(td), "test", time.Now())
	if err != nil || len(rs) != 1 {
		t.Fatal(errors.Join(err, fmt.Errorf("%d roots", len(rs))))
	}
	return rs[0]
}

func shimServingCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
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
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}
