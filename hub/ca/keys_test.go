package ca_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/model"
)

func createNamespace(t *testing.T, c *remoteCluster, name string) {
	t.Helper()
	if err := c.ctrl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// Replicas starting together on an empty namespace all end with the same
// self-signed root: one creates istio-ca-secret, the others read it.
func TestLoadOrCreateKeysRace(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "race")
	const replicas = 4
	var wg sync.WaitGroup
	keys := make([]*ca.Keys, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	for i := range replicas {
		wg.Go(func() {
			<-start
			keys[i], errs[i] = ca.LoadOrCreateKeys(t.Context(), c.ctrl, "race", time.Now(), ca.KeyOptions{})
		})
	}
	close(start)
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !keys[i].CA().Cert.Equal(keys[0].CA().Cert) || string(keys[i].RootsPEM()) != string(keys[0].RootsPEM()) {
			t.Errorf("replica %d signs with another root", i)
		}
		if len(keys[i].Chain()) != 0 {
			t.Errorf("replica %d: chain of %d for a self-signed root", i, len(keys[i].Chain()))
		}
	}
	var sec corev1.Secret
	if err := c.ctrl.Get(t.Context(), client.ObjectKey{Namespace: "race", Name: ca.SelfSignedSecret}, &sec); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{ca.KeyCACert, ca.KeyCAKey, ca.KeyRootCert} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("%s has no %s", ca.SelfSignedSecret, k)
		}
	}
	if keys[0].Source() != "race/"+ca.SelfSignedSecret {
		t.Errorf("source %q", keys[0].Source())
	}
}

// An operator's plug-in CA (an intermediate under their own root) is used
// when present, and what it signs chains through it to their root.
func TestPluginCA(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "plugin")
	now := time.Now()
	rootCert, rootKey := selfSigned(t, "operator root", now)
	interCert, interKey := signedCA(t, "operator intermediate", rootCert, rootKey, now)
	interKeyPEM := pkcs8(t, interKey)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret, Namespace: "plugin"},
		Data: map[string][]byte{
			ca.KeyCACert:    pemCert(interCert),
			ca.KeyCAKey:     interKeyPEM,
			ca.KeyRootCert:  pemCert(rootCert),
			ca.KeyCertChain: append(pemCert(interCert), pemCert(rootCert)...),
		},
	}
	if err := c.ctrl.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	keys, err := ca.LoadOrCreateKeys(t.Context(), c.ctrl, "plugin", now, ca.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !keys.CA().Cert.Equal(interCert) {
		t.Fatalf("signing CA is %q, want the plug-in intermediate", keys.CA().Cert.Subject)
	}
	if len(keys.Chain()) != 1 || string(keys.RootsPEM()) != string(pemCert(rootCert)) {
		t.Fatalf("chain %d, roots %q", len(keys.Chain()), keys.RootsPEM())
	}
	var self corev1.Secret
	if err := c.ctrl.Get(t.Context(), client.ObjectKey{Namespace: "plugin", Name: ca.SelfSignedSecret}, &self); err == nil {
		t.Error("a self-signed root was created although cacerts exists")
	}

	srv, err := ca.NewServer(ca.ServerOptions{Keys: keys, Authenticator: fixedIdentity{}})
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := newCSR(t, nil, nil)
	resp, err := srv.CreateCertificate(incoming("cluster-1", "token"), &pb.IstioCertificateRequest{Csr: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.CertChain) != 3 {
		t.Fatalf("chain of %d elements, want [leaf, intermediate, root]", len(resp.CertChain))
	}
	leaf, mid, roots := parseChain(t, resp.CertChain)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mid, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not chain to the operator's root: %v", err)
	}

	t.Run("invalid plug-in CA refused", func(t *testing.T) {
		other, _ := selfSigned(t, "someone else", now)
		for name, data := range map[string]map[string][]byte{
			"key of another CA": {ca.KeyCACert: pemCert(interCert), ca.KeyCAKey: pkcs8(t, rootKey), ca.KeyRootCert: pemCert(rootCert)},
			"foreign root":      {ca.KeyCACert: pemCert(interCert), ca.KeyCAKey: interKeyPEM, ca.KeyRootCert: pemCert(other)},
		} {
			if _, err := ca.KeysFromPEM(data[ca.KeyCACert], data[ca.KeyCAKey], nil, data[ca.KeyRootCert], now); !errors.Is(err, ca.ErrInvalidCASecret) {
				t.Errorf("%s: %v, want ErrInvalidCASecret", name, err)
			}
		}
		createNamespace(t, c, "plugin-bad")
		bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret, Namespace: "plugin-bad"},
			Data: map[string][]byte{ca.KeyCACert: pemCert(interCert), ca.KeyCAKey: interKeyPEM}}
		if err := c.ctrl.Create(t.Context(), bad); err != nil {
			t.Fatal(err)
		}
		if _, err := ca.LoadOrCreateKeys(t.Context(), c.ctrl, "plugin-bad", now, ca.KeyOptions{}); !errors.Is(err, ca.ErrInvalidCASecret) {
			t.Errorf("cacerts without root-cert.pem: %v, want ErrInvalidCASecret", err)
		}
	})
}

// fixedIdentity authenticates every caller as demo/echo.
type fixedIdentity struct{}

func (fixedIdentity) Authenticate(_ context.Context, cluster model.ClusterID, token string) (ca.Identity, error) {
	if token == "" {
		return ca.Identity{}, ca.ErrMissingCredentials
	}
	return ca.Identity{Cluster: cluster, Namespace: "demo", ServiceAccount: "echo"}, nil
}

// incoming is a server-side context with the caller's metadata.
func incoming(cluster, token string) context.Context {
	return metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("clusterid", cluster, "authorization", "Bearer "+token))
}

func selfSigned(t testing.TB, cn string, now time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := caTemplate(cn, now, 1)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func signedCA(t testing.TB, cn string, parent *x509.Certificate, parentKey crypto.Signer, now time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := caTemplate(cn, now, 0)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func caTemplate(cn string, now time.Time, pathLen int) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true,
		IsCA: true, MaxPathLen: pathLen, MaxPathLenZero: pathLen == 0,
	}
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func pkcs8(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
