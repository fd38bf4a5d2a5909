package ca_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/pki"
)

// FuzzCreateCertificateCSR feeds arbitrary CSRs and lifetimes to the
// certificate API of an authenticated caller. Whatever the input, the
// server must not panic, must answer InvalidArgument or a certificate, and
// a certificate must carry the caller's identity alone, never a CA.
func FuzzCreateCertificateCSR(f *testing.F) {
	now := time.Unix(1_750_000_000, 0)
	root, err := pki.NewCA("fuzz root", 10*365*24*time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	keyPEM, err := root.KeyPEM()
	if err != nil {
		f.Fatal(err)
	}
	keys, err := ca.KeysFromPEM(root.CertPEM, keyPEM, nil, nil, now)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := ca.NewServer(ca.ServerOptions{Keys: keys, Authenticator: fixedIdentity{}})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := newCSR(f, nil, nil)
	other, _ := newCSR(f, []string{"spiffe://cluster.local/ns/kube-system/sa/admin", "spiffe://evil/x"}, []string{"*.example.com"})
	f.Add(good, int64(3600))
	f.Add(other, int64(0))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), int64(-1))
	f.Add([]byte{0x30, 0x82, 0x01, 0x00}, int64(1<<62))
	f.Add([]byte(""), int64(60))
	f.Fuzz(func(t *testing.T, csr []byte, ttl int64) {
		resp, err := srv.CreateCertificate(incoming("cluster-1", "token"), &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: ttl})
		if err != nil {
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument {
				t.Fatalf("error %v, want InvalidArgument", err)
			}
			return
		}
		if len(resp.CertChain) != 2 {
			t.Fatalf("chain of %d", len(resp.CertChain))
		}
		leaf, _, _ := parseChain(t, resp.CertChain)
		if leaf.IsCA || len(leaf.URIs) != 1 || leaf.URIs[0].String() != echoID ||
			len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 0 || len(leaf.EmailAddresses) != 0 {
			t.Fatalf("leaf IsCA=%v URIs=%v DNS=%v IPs=%v", leaf.IsCA, leaf.URIs, leaf.DNSNames, leaf.IPAddresses)
		}
		if d := leaf.NotAfter.Sub(leaf.NotBefore); d > 24*time.Hour+10*time.Minute {
			t.Fatalf("lifetime %v beyond the 24h maximum", d)
		}
	})
}

// A request without credentials never reaches the CSR parser.
func TestMissingCredentialsBeforeCSR(t *testing.T) {
	now := time.Now()
	root, _ := pki.NewCA("root", time.Hour, now)
	keyPEM, _ := root.KeyPEM()
	keys, err := ca.KeysFromPEM(root.CertPEM, keyPEM, nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.NewServer(ca.ServerOptions{Keys: keys, Authenticator: fixedIdentity{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: "garbage"})
	if st, _ := status.FromError(err); st.Code() != codes.Unauthenticated {
		t.Errorf("no metadata: %v, want Unauthenticated", err)
	}
	if !errors.Is(ca.ErrMissingCredentials, ca.ErrMissingCredentials) || !ca.IsUnauthenticated(ca.ErrUnknownCluster) || ca.IsUnauthenticated(ca.ErrTokenReview) {
		t.Error("IsUnauthenticated classification")
	}
}
