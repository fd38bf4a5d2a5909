package ca_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"slices"
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

// FuzzKeysFromPEM feeds arbitrary contents of a CA Secret (cacerts is
// written by operators and reloaded at run time) to KeysFromPEM. Whatever
// the input it must not panic, must refuse with ErrInvalidCASecret, and
// keys it accepts must sign leaves that verify with the roots they name,
// under the roots SigningRoots lists.
func FuzzKeysFromPEM(f *testing.F) {
	now := time.Unix(1_750_000_000, 0)
	root, err := pki.NewCA("fuzz root", 10*365*24*time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	other, err := pki.NewCA("fuzz other", 10*365*24*time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	keyPEM, _ := root.KeyPEM()
	f.Add(root.CertPEM, keyPEM, []byte(nil), root.CertPEM)
	f.Add(root.CertPEM, keyPEM, root.CertPEM, append(bytes.Clone(other.CertPEM), root.CertPEM...))
	f.Add(root.CertPEM, keyPEM, []byte(nil), other.CertPEM) // does not chain
	f.Add(root.CertPEM, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), []byte(nil), []byte(nil))
	f.Add([]byte("not pem"), keyPEM, []byte("junk"), []byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"))
	// The signing check below costs a key, a signature and a chain
	// verification, hundreds of times what refusing an input does, and
	// mutations of an accepted Secret mostly parse to the same keys (a
	// byte after the PEM blocks, say). It depends only on what was
	// parsed, so it is made once per distinct set of keys.
	checked := map[[sha256.Size]byte]bool{}
	f.Fuzz(func(t *testing.T, certPEM, keyPEM, chainPEM, rootsPEM []byte) {
		keys, err := ca.KeysFromPEM(certPEM, keyPEM, chainPEM, rootsPEM, now)
		if err != nil {
			if !errors.Is(err, ca.ErrInvalidCASecret) {
				t.Fatalf("error %v does not wrap ErrInvalidCASecret", err)
			}
			return
		}
		h := sha256.New()
		h.Write(keys.CA().CertPEM)
		for _, s := range slices.Concat(keys.Chain(), keys.SigningRoots()) {
			h.Write([]byte(s))
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if checked[sum] {
			return
		}
		checked[sum] = true
		leafPEM, _, err := keys.CA().Issue(pki.IssueOptions{URIs: []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/a/sa/b"}},
			Validity: time.Hour, Client: true, Now: now})
		if err != nil {
			return // a CA whose key cannot sign this (an odd algorithm) is the caller's to refuse at signing
		}
		block, _ := pem.Decode(leafPEM)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		mid := x509.NewCertPool()
		for _, c := range keys.Chain() {
			mid.AppendCertsFromPEM([]byte(c))
		}
		chains, err := leaf.Verify(x509.VerifyOptions{Roots: keys.Roots(), Intermediates: mid, CurrentTime: now.Add(time.Minute),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			t.Fatalf("a leaf of accepted keys does not verify with their roots: %v", err)
		}
		for _, c := range chains {
			if !slices.Contains(keys.SigningRoots(), ca.Fingerprint(c[len(c)-1])) {
				t.Fatalf("leaf verifies under a root SigningRoots does not list")
			}
		}
	})
}
