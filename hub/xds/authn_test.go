package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// node returns an Istio sidecar node of pod in ns, with metadata key/value
// pairs.
func node(pod, ns string, kv ...string) *corev3.Node {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := 0; i+1 < len(kv); i += 2 {
		md.Fields[kv[i]] = structpb.NewStringValue(kv[i+1])
	}
	return &corev3.Node{Id: xdsnode.SidecarID("10.0.0.1", pod, ns, "cluster.local"), Metadata: md}
}

func TestCheckNode(t *testing.T) {
	cert := func(ids ...string) Caller {
		c := Caller{Via: ViaCertificate}
		for _, id := range ids {
			ns, sa, _ := strings.Cut(id, "/")
			c.Principals = append(c.Principals, Principal{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: sa})
		}
		return c
	}
	token := func(cluster model.ClusterID, ns, sa string) Caller {
		return Caller{Via: ViaToken, Cluster: cluster, Principals: []Principal{{Namespace: ns, ServiceAccount: sa}}}
	}
	const (
		ns = xdsnode.MetadataNamespace
		sa = xdsnode.MetadataServiceAccount
		cl = xdsnode.MetadataClusterID
	)
	for _, tc := range []struct {
		name   string
		caller Caller
		node   *corev3.Node
		want   error // nil: allowed
	}{
		{"certificate of the node's namespace", cert("demo/echo"), node("echo-1", "demo", ns, "demo"), nil},
		{"namespace from the node ID alone", cert("demo/echo"), node("echo-1", "demo"), nil},
		{"namespace from metadata alone", cert("demo/echo"), &corev3.Node{Id: "not-istio", Metadata: node("x", "demo", ns, "demo").Metadata}, nil},
		{"service account matches", cert("demo/echo"), node("echo-1", "demo", ns, "demo", sa, "echo"), nil},
		{"token of the node's cluster", token("c1", "demo", "echo"), node("echo-1", "demo", ns, "demo", cl, "c1"), nil},
		{"token, node names no cluster", token("c1", "demo", "echo"), node("echo-1", "demo"), nil},
		{"certificate names no cluster, node does", cert("demo/echo"), node("echo-1", "demo", cl, "c2"), nil},
		{"second SPIFFE ID matches", cert("other/x", "demo/echo"), node("echo-1", "demo", sa, "echo"), nil},

		{"certificate of another namespace", cert("other/echo"), node("echo-1", "demo", ns, "demo"), ErrNamespaceMismatch},
		{"token of another namespace", token("c1", "other", "echo"), node("echo-1", "demo"), ErrNamespaceMismatch},
		{"metadata wins over the node ID", cert("demo/echo"), node("echo-1", "elsewhere", ns, "demo"), nil},
		// Istio's pkg/adsc defaults, istioctl proxy-status's stream.
		{"istioctl's node", token("config", "istio-system", "default"),
			&corev3.Node{Id: "sidecar~10.0.0.9~test-1.default~default.svc.cluster.local", Metadata: node("x", "x",
				ns, "istio-system", sa, "default", xdsnode.MetadataGenerator, xdsnode.GeneratorEvent).Metadata}, nil},
		{"node ID of another namespace, no metadata", cert("demo/echo"), node("echo-1", "victim"), ErrNamespaceMismatch},
		{"metadata claims another namespace", cert("demo/echo"), node("echo-1", "demo", ns, "victim"), ErrNamespaceMismatch},
		{"another service account", cert("demo/echo"), node("echo-1", "demo", sa, "admin"), ErrServiceAccountMismatch},
		{"token from another cluster than the node's", token("c2", "demo", "echo"), node("echo-1", "demo", cl, "c1"), ErrClusterMismatch},
		{"no node", cert("demo/echo"), nil, ErrNoNode},
		{"node without ID", cert("demo/echo"), &corev3.Node{}, ErrNoNode},
		{"node claims no namespace", cert("demo/echo"), &corev3.Node{Id: "not-istio"}, ErrNoNamespace},
		{"caller without principals", Caller{Via: ViaCertificate}, node("echo-1", "demo"), ErrNamespaceMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNode(tc.caller, tc.node)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			case tc.want != nil && !denied(err):
				t.Fatalf("%v is not a PermissionDenied cause", err)
			}
		})
	}
}

func TestPrincipalOf(t *testing.T) {
	for in, want := range map[string]*Principal{
		"spiffe://cluster.local/ns/demo/sa/echo": {TrustDomain: "cluster.local", Namespace: "demo", ServiceAccount: "echo"},
		"spiffe://td.example/ns/a/sa/b":          {TrustDomain: "td.example", Namespace: "a", ServiceAccount: "b"},
		"spiffe://cluster.local/ns/demo/sa/":     nil,
		"spiffe://cluster.local/ns/demo":         nil,
		"spiffe://cluster.local/ns/a/sa/b/c":     nil,
		"spiffe://cluster.local/sa/b/ns/a":       nil,
		"spiffe://Cluster.Local/ns/a/sa/b":       nil,
		"https://cluster.local/ns/a/sa/b":        nil,
		"spiffe://cluster.local/ns/a/sa/b?x=1":   nil,
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := principalOf(u)
		if ok != (want != nil) || ok && got != *want {
			t.Errorf("principalOf(%s) = %+v, %v; want %+v", in, got, ok, want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("%w: x", ErrNoCredentials):          reasonNoCredentials,
		fmt.Errorf("%w: x", ca.ErrMissingCredentials):  reasonNoCredentials,
		fmt.Errorf("%w: x", ca.ErrTokenRejected):       reasonTokenRejected,
		fmt.Errorf("%w: x", ca.ErrTokenReview):         reasonReviewFailed,
		fmt.Errorf("%w: x", ErrNamespaceMismatch):      reasonNamespace,
		fmt.Errorf("%w: x", ErrClusterMismatch):        reasonCluster,
		fmt.Errorf("%w: x", ErrServiceAccountMismatch): reasonServiceAccount,
		errors.New("something else"):                   reasonOther,
	} {
		if got := reasonOf(err); got != want {
			t.Errorf("reasonOf(%v) = %s, want %s", err, got, want)
		}
	}
}

// authnCluster is a remote cluster of the authenticated-port test: a real
// kube-apiserver with its own service-account signing key.
type authnCluster struct {
	id   model.ClusterID
	cfg  *rest.Config
	kube kubernetes.Interface
}

// token asks the cluster for a token of ns/sa for audience istio-ca.
func (c *authnCluster) token(t *testing.T, ns, sa string) string {
	t.Helper()
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{ca.DefaultAudience}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s in %s: %v", ns, sa, c.id, err)
	}
	return tr.Status.Token
}

// authnClusters implements ca.ClusterConfigs over the test's clusters.
type authnClusters []*authnCluster

func (cs authnClusters) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	for _, c := range cs {
		if c.id == id {
			return c.cfg, true
		}
	}
	return nil, false
}

// startClusters starts one apiserver per id, in parallel, with service
// accounts demo/echo and istio-system/istioctl in each; they stop when the
// test ends.
func startClusters(t *testing.T, ids ...model.ClusterID) authnClusters {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-unit` (it builds the kube-apiserver and etcd first)")
	}
	out := make(authnClusters, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := &envtest.Environment{BinaryAssetsDirectory: assets}
			cfg, err := env.Start()
			if err != nil {
				errs[i] = fmt.Errorf("apiserver of %s: %w", id, err)
				return
			}
			t.Cleanup(func() { _ = env.Stop() })
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			ctx := context.Background()
			for _, sa := range [][2]string{{"demo", "echo"}, {"istio-system", "istioctl"}} {
				if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sa[0]}}, metav1.CreateOptions{}); err != nil {
					errs[i] = err
					return
				}
				if _, err := kube.CoreV1().ServiceAccounts(sa[0]).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa[1]}}, metav1.CreateOptions{}); err != nil {
					errs[i] = err
					return
				}
			}
			out[i] = &authnCluster{id: id, cfg: cfg, kube: kube}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// authnPort is a hub's CA port with authenticated xDS, wired as the hub
// wires it: a real ca.Server whose gRPC server carries the xDS services,
// one token authenticator shared by both.
type authnPort struct {
	addr string
	keys *ca.Keys
	xds  *Server
}

// startAuthnPort serves an xDS Server with no plaintext port and a CA on
// one TLS port until the test ends. Tokens that name no cluster are
// reviewed by configCluster.
func startAuthnPort(t *testing.T, clusters ca.ClusterConfigs, configCluster model.ClusterID) *authnPort {
	t.Helper()
	now := time.Now()
	root, err := pki.NewCA("test root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := root.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ca.KeysFromPEM(root.CertPEM, keyPEM, nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tokens, err := ca.NewAuthenticator(ca.AuthenticatorOptions{Clusters: clusters, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	xs := New(Options{
		Registry: st, Log: testr.New(t), Metrics: reg,
		Authn: Authn{Tokens: tokens, Roots: keys.RootsPEM, ConfigCluster: configCluster},
	})
	cas, err := ca.NewServer(ca.ServerOptions{
		Keys: keys, Authenticator: tokens, Log: testr.New(t),
		ServingDNSNames: []string{"istiod.istio-system.svc"},
		Services:        []func(grpc.ServiceRegistrar){xs.RegisterAuthenticated},
		GRPCOptions:     GRPCOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := xs.Run(ctx); err != nil {
			t.Errorf("xds: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := cas.ServeListener(ctx, lis); err != nil {
			t.Errorf("ca: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	if xs.Addr() != nil {
		t.Fatalf("plaintext port %v open with Addr empty", xs.Addr())
	}
	return &authnPort{addr: lis.Addr().String(), keys: keys, xds: xs}
}

// cert issues a client certificate of ns/sa from the port's CA.
func (p *authnPort) cert(t *testing.T, ns, sa string) *tls.Certificate {
	t.Helper()
	return issueCert(t, p.keys.CA(), ns, sa)
}

func issueCert(t *testing.T, issuer *pki.CA, ns, sa string) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := issuer.Issue(pki.IssueOptions{
		URIs: []*url.URL{pki.DefaultTrustDomain.WorkloadID(ns, sa)}, Validity: time.Hour, Client: true, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// conn dials the port with TLS, verifying the serving certificate for
// istiod.istio-system.svc (what pilot-agent checks) against the mesh root,
// presenting cert when not nil.
func (p *authnPort) conn(t *testing.T, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.keys.Roots(), ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// creds are what a test caller presents.
type creds struct {
	cert    *tls.Certificate
	token   string
	cluster model.ClusterID // ClusterID metadata
}

func (c creds) ctx(ctx context.Context) context.Context {
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	if c.cluster != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "ClusterID", string(c.cluster))
	}
	return ctx
}

// sotw opens a SotW ADS stream, asks for clusters as n, and returns the
// first response or the stream's error.
func (p *authnPort) sotw(t *testing.T, c creds, n *corev3.Node) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(p.conn(t, c.cert)).StreamAggregatedResources(c.ctx(ctx))
	if err != nil {
		return nil, err
	}
	// A stream refused at once fails Send with io.EOF; Recv has the status.
	_ = stream.Send(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: resourcev3.ClusterType})
	return stream.Recv()
}

// delta is sotw over a Delta stream.
func (p *authnPort) delta(t *testing.T, c creds, n *corev3.Node) (*discoveryv3.DeltaDiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(p.conn(t, c.cert)).DeltaAggregatedResources(c.ctx(ctx))
	if err != nil {
		return nil, err
	}
	_ = stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: n, TypeUrl: resourcev3.ClusterType})
	return stream.Recv()
}

func (p *authnPort) failures(reason string) float64 {
	return promtest.ToFloat64(p.xds.authn.failures.WithLabelValues(reason))
}

// wantRefused checks that err is a refusal with code, naming cause, and
// that it was counted under reason.
func (p *authnPort) wantRefused(t *testing.T, err error, code codes.Code, reason, cause string, before float64) {
	t.Helper()
	st, _ := grpcstatus.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), cause) {
		t.Fatalf("got %v, want %s naming %q", err, code, cause)
	}
	if got := p.failures(reason); got != before+1 {
		t.Errorf("meshfed_xds_auth_failures_total{reason=%q} = %v, want %v", reason, got, before+1)
	}
}

// wantClusters checks that r is the CDS answer with the store's cluster.
func wantClusters(t *testing.T, r *discoveryv3.DiscoveryResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if r.GetTypeUrl() != resourcev3.ClusterType || len(r.GetResources()) != 1 {
		t.Fatalf("got %s with %d resources, want the one cluster", r.GetTypeUrl(), len(r.GetResources()))
	}
	var c clusterv3.Cluster
	if err := r.GetResources()[0].UnmarshalTo(&c); err != nil || !strings.Contains(c.GetName(), string(echo)) {
		t.Fatalf("cluster %q (%v), want echo's", c.GetName(), err)
	}
}

// TestAuthenticatedPort runs ADS and CSDS on a CA's TLS port against two
// real apiservers: each kind of bad caller is refused with its cause and
// counted; a workload certificate and a reviewed token get config.
func TestAuthenticatedPort(t *testing.T) {
	clusters := startClusters(t, "c1", "c2")
	c1, c2 := clusters[0], clusters[1]
	p := startAuthnPort(t, clusters, "c1")
	tok1, tok2 := c1.token(t, "demo", "echo"), c2.token(t, "demo", "echo")
	// A JWT-shaped token no apiserver issued.
	const forged = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVtbzplY2hvIn0.c2ln"
	echoNode := func(cluster model.ClusterID) *corev3.Node {
		return node("echo-1", "demo", xdsnode.MetadataNamespace, "demo", xdsnode.MetadataClusterID, string(cluster),
			xdsnode.MetadataServiceAccount, "echo")
	}

	refusals := []struct {
		name   string
		creds  creds
		code   codes.Code
		reason string
		cause  string // in the status message
	}{
		{"no credentials", creds{}, codes.Unauthenticated, reasonNoCredentials, "no credentials"},
		{"forged token", creds{token: forged, cluster: "c1"}, codes.Unauthenticated, reasonTokenRejected, "token rejected"},
		{"token of c2 reviewed by the node's cluster c1", creds{token: tok2}, codes.Unauthenticated, reasonTokenRejected, "cluster c1"},
		{"token of c2 claimed by a node of c1", creds{token: tok2, cluster: "c2"}, codes.PermissionDenied, reasonCluster, "claims cluster c1"},
		{"token of an unknown cluster", creds{token: tok1, cluster: "nowhere"}, codes.Unauthenticated, reasonUnknownCluster, "nowhere"},
		{"certificate of another namespace", creds{cert: p.cert(t, "other", "echo")}, codes.PermissionDenied, reasonNamespace, "claims namespace demo"},
		{"certificate of another service account", creds{cert: p.cert(t, "demo", "admin")}, codes.PermissionDenied, reasonServiceAccount, "claims service account echo"},
	}
	for _, tc := range refusals {
		t.Run("SotW refuses "+tc.name, func(t *testing.T) {
			before := p.failures(tc.reason)
			_, err := p.sotw(t, tc.creds, echoNode("c1"))
			p.wantRefused(t, err, tc.code, tc.reason, tc.cause, before)
		})
		t.Run("Delta refuses "+tc.name, func(t *testing.T) {
			before := p.failures(tc.reason)
			_, err := p.delta(t, tc.creds, echoNode("c1"))
			p.wantRefused(t, err, tc.code, tc.reason, tc.cause, before)
		})
	}
	t.Run("a certificate of another CA is refused", func(t *testing.T) {
		other, err := pki.NewCA("other root", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		before := p.failures(reasonBadCertificate)
		_, err = p.sotw(t, creds{cert: issueCert(t, other, "demo", "echo"), token: tok1}, echoNode("c1"))
		p.wantRefused(t, err, codes.Unauthenticated, reasonBadCertificate, "not of the mesh", before)
	})

	t.Run("a workload certificate gets config", func(t *testing.T) {
		r, err := p.sotw(t, creds{cert: p.cert(t, "demo", "echo")}, echoNode("c1"))
		wantClusters(t, r, err)
	})
	t.Run("a token with ClusterID gets config", func(t *testing.T) {
		r, err := p.sotw(t, creds{token: tok1, cluster: "c1"}, echoNode("c1"))
		wantClusters(t, r, err)
	})
	t.Run("a token without ClusterID is reviewed by the node's cluster", func(t *testing.T) {
		r, err := p.sotw(t, creds{token: tok2}, echoNode("c2"))
		wantClusters(t, r, err)
	})
	t.Run("Delta with a token gets config", func(t *testing.T) {
		r, err := p.delta(t, creds{token: tok2, cluster: "c2"}, echoNode("c2"))
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		if r.GetTypeUrl() != resourcev3.ClusterType || len(r.GetResources()) != 1 {
			t.Fatalf("got %s with %d resources", r.GetTypeUrl(), len(r.GetResources()))
		}
	})

	// A stream is held to the identity it proved for its whole life: a
	// later request that names another workload's node ends it, while
	// its ACKs (no node, or the first's) pass.
	t.Run("a later request naming another node is refused", func(t *testing.T) {
		other := node("admin-1", "admin", xdsnode.MetadataNamespace, "admin", xdsnode.MetadataClusterID, "c1")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := creds{cert: p.cert(t, "demo", "echo")}
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(p.conn(t, c.cert))

		sotw, err := ads.StreamAggregatedResources(c.ctx(ctx))
		if err != nil {
			t.Fatal(err)
		}
		_ = sotw.Send(&discoveryv3.DiscoveryRequest{Node: echoNode("c1"), TypeUrl: resourcev3.ClusterType})
		r, err := sotw.Recv()
		wantClusters(t, r, err)
		_ = sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		before := p.failures(reasonNamespace)
		_ = sotw.Send(&discoveryv3.DiscoveryRequest{Node: other, TypeUrl: resourcev3.ListenerType})
		_, err = sotw.Recv()
		p.wantRefused(t, err, codes.PermissionDenied, reasonNamespace, "claims namespace admin", before)

		delta, err := ads.DeltaAggregatedResources(c.ctx(ctx))
		if err != nil {
			t.Fatal(err)
		}
		_ = delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: echoNode("c1"), TypeUrl: resourcev3.ClusterType})
		dr, err := delta.Recv()
		if err != nil || len(dr.GetResources()) != 1 {
			t.Fatalf("first Delta response: %d resources, %v", len(dr.GetResources()), err)
		}
		_ = delta.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: dr.GetNonce()})
		before = p.failures(reasonNamespace)
		_ = delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: other, TypeUrl: resourcev3.ListenerType})
		_, err = delta.Recv()
		p.wantRefused(t, err, codes.PermissionDenied, reasonNamespace, "claims namespace admin", before)
	})

	t.Run("CSDS", func(t *testing.T) {
		fetch := func(c creds) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := statusv3.NewClientStatusDiscoveryServiceClient(p.conn(t, c.cert)).
				FetchClientStatus(c.ctx(ctx), &statusv3.ClientStatusRequest{})
			return err
		}
		before := p.failures(reasonNoCredentials)
		p.wantRefused(t, fetch(creds{}), codes.Unauthenticated, reasonNoCredentials, "no credentials", before)
		before = p.failures(reasonTokenRejected)
		p.wantRefused(t, fetch(creds{token: forged}), codes.Unauthenticated, reasonTokenRejected, "token rejected", before)
		// istioctl's way: a token of the config cluster, no ClusterID.
		if err := fetch(creds{token: c1.token(t, "istio-system", "istioctl")}); err != nil {
			t.Errorf("config cluster's token: %v", err)
		}
		if err := fetch(creds{cert: p.cert(t, "other", "any")}); err != nil {
			t.Errorf("any mesh certificate: %v", err)
		}
	})
}

// TestPlaintextPortUnauthenticated: the plaintext port asks for nothing,
// and an Authn set for the TLS port does not change that.
func TestPlaintextPortUnauthenticated(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st, Authn: Authn{Roots: func() []byte { return nil }, ConfigCluster: "c1"}})
	a := newADS(t, s.Addr().String(), "c1", "r1")
	a.node = node("echo-1", "demo")
	wantClusters(t, a.subscribe(resourcev3.ClusterType), nil)
	for _, r := range reasons {
		if n := promtest.ToFloat64(s.authn.failures.WithLabelValues(r.reason)); n != 0 {
			t.Errorf("%s counted %v on the plaintext port", r.reason, n)
		}
	}
}

// TestRefusalLogsBounded: a burst of refused calls (a client retrying a
// forged token) is logged at info level refusalLogBurst times, then
// refusalLogRate a second; every refusal is counted.
func TestRefusalLogsBounded(t *testing.T) {
	var info, debug int
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, `"level"=1`) {
			debug++
		} else {
			info++
		}
	}, funcr.Options{Verbosity: 1, LogInfoLevel: ptrTo("level")})
	clk := testingclock.NewFakePassiveClock(time.Unix(1_000, 0))
	reg := prometheus.NewRegistry()
	a := newAuthenticator(Authn{}, clk, log, reg)
	for range 50 {
		_ = a.refuse(ErrNoCredentials, "198.51.100.7:5555", "")
	}
	if info != refusalLogBurst || debug != 50-refusalLogBurst {
		t.Errorf("a burst of 50 refusals: %d at info, %d at debug level; want %d and %d", info, debug, refusalLogBurst, 50-refusalLogBurst)
	}
	clk.SetTime(clk.Now().Add(3 * time.Second))
	_ = a.refuse(ErrNoCredentials, "198.51.100.7:5555", "")
	if info != refusalLogBurst+1 {
		t.Errorf("a refusal 3 s later was not logged at info level (%d)", info)
	}
	if got := promtest.ToFloat64(a.failures.WithLabelValues(reasonOf(ErrNoCredentials))); got != 51 {
		t.Errorf("%v refusals counted, want 51", got)
	}
}

func ptrTo[T any](v T) *T { return &v }
