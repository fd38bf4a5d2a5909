package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// tokenIssuer is a cluster of the fleet, remote or config.
type tokenIssuer interface {
	EnsureServiceAccount(ctx context.Context, ns, name string) error
	ServiceAccountToken(ctx context.Context, ns, sa string, audiences ...string) (string, error)
}

// serviceAccountToken returns a real TokenRequest token of ns/sa from
// cluster r (creating the account) for audiences (none: the apiserver's
// own, as kubectl create token gives people).
func serviceAccountToken(t *testing.T, r tokenIssuer, ns, sa string, audiences ...string) string {
	t.Helper()
	if err := r.EnsureServiceAccount(t.Context(), ns, sa); err != nil {
		t.Fatal(err)
	}
	token, err := r.ServiceAccountToken(t.Context(), ns, sa, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestWorkloadCertificates: a workload of cluster-2 with a token from
// cluster-2's apiserver gets a certificate for its own identity from a hub
// process; the same token claimed for cluster-3, a wrong audience and a
// forged token are refused; every replica publishes the same trust bundle.
func TestWorkloadCertificates(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(3)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	h0 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key})
	h1 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{h0}})

	// Both replicas sign with the one root kept in the config cluster,
	// and both publish it in the federated bundle.
	var rootPEM string
	testutil.Eventually(t, converge, poll, func() error {
		var fps []string
		for _, h := range []*framework.Hub{h0, h1} {
			tz, err := h.Trustz(ctx)
			if err != nil {
				return err
			}
			if len(tz.Roots) != 1 {
				return fmt.Errorf("%s trust bundle has %d roots", h.ReplicaID(), len(tz.Roots))
			}
			fps = append(fps, tz.Roots[0].Fingerprint)
			rootPEM = tz.Roots[0].PEM
		}
		if fps[0] != fps[1] {
			return fmt.Errorf("replicas trust different roots: %v", fps)
		}
		return nil
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(rootPEM)) {
		t.Fatal("trust bundle PEM does not parse")
	}
	out, err := framework.Meshfedctl(t, "trust-bundle", "--monitoring", strings.TrimPrefix(h1.MonitoringURL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cluster.local") {
		t.Errorf("meshfedctl trust-bundle:\n%s", out)
	}

	c2 := f.Remote("cluster-2")
	token := serviceAccountToken(t, c2, "demo", "echo", "istio-ca")

	t.Run("the token's own cluster signs its own identity", func(t *testing.T) {
		a, err := agent.New(agent.Options{
			CAAddr: h1.CAAddr(), CARoots: roots, ServerName: "localhost", ClusterID: "cluster-2",
			TokenFunc: func(context.Context) (string, error) { return token, nil },
			Dir:       t.TempDir(), TTL: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = a.Run(actx) }()
		select {
		case <-a.Ready():
		case <-time.After(converge):
			t.Fatal("no certificate")
		}
		leaf := a.Current().Leaf
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/demo/sa/echo" {
			t.Fatalf("certificate identity %v", leaf.URIs)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("certificate does not chain to the federated root: %v", err)
		}
	})

	// call sends one CreateCertificate asking for another identity.
	call := func(cluster, tok string) (*pb.IstioCertificateResponse, error) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
		if err != nil {
			t.Fatal(err)
		}
		csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
		cc, err := grpc.NewClient(h0.CAAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok, "ClusterID", cluster)
		return pb.NewIstioCertificateServiceClient(cc).CreateCertificate(cctx, &pb.IstioCertificateRequest{Csr: csr, ValidityDuration: 3600})
	}
	for _, tc := range []struct {
		name, cluster, token, cause string
	}{
		{"token of cluster-2 claimed for cluster-3", "cluster-3", token, "cluster-3"},
		{"wrong audience", "cluster-2", serviceAccountToken(t, c2, "demo", "echo", "not-istio-ca"), "audience"},
		{"forged token", "cluster-2", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a3ViZS1zeXN0ZW06YWRtaW4ifQ.c2ln", "rejected"},
		{"unknown cluster", "cluster-9", token, "unknown cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(tc.cluster, tc.token)
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.cause) {
				t.Fatalf("got %v, want Unauthenticated naming %q", err, tc.cause)
			}
		})
	}
}
