package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"
)

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("meshfed test root", 24*time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parseCertPEM(t testing.TB, b []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", b)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("Issue returned more than the leaf: %q", rest)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func verifyLeaf(t testing.TB, ca *CA, leaf *x509.Certificate, at time.Time, usage x509.ExtKeyUsage) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func TestPKINewCA(t *testing.T) {
	ca := testCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("not a signing CA: IsCA=%v usage=%v", c.IsCA, c.KeyUsage)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("root may sign sub-CAs: MaxPathLen=%d zero=%v", c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.Subject.CommonName != "meshfed test root" {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if k, ok := ca.Key.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("default CA key is %T, want ECDSA P-256", ca.Key)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if !c.NotBefore.Before(testNow) || !c.NotAfter.Equal(testNow.Add(24*time.Hour)) {
		t.Errorf("validity %v..%v, want from before %v to +24h", c.NotBefore, c.NotAfter, testNow)
	}
	if got := parseCertPEM(t, ca.CertPEM); !got.Equal(c) {
		t.Error("CertPEM does not hold Cert")
	}

	for name, tc := range map[string]struct {
		cn       string
		validity time.Duration
		now      time.Time
	}{
		"empty name":    {"", time.Hour, testNow},
		"zero validity": {"x", 0, testNow},
		"zero time":     {"x", time.Hour, time.Time{}},
	} {
		if _, err := NewCA(tc.cn, tc.validity, tc.now); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
}

func TestPKILoadCARoundTrip(t *testing.T) {
	ca := testCA(t)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !bytes.Equal(loaded.CertPEM, ca.CertPEM) {
		t.Fatal("loaded CA differs from the saved one")
	}
	// A leaf signed by the loaded CA verifies against the original root.
	certPEM, _, err := loaded.Issue(IssueOptions{CommonName: "x", Validity: time.Hour, Server: true, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyLeaf(t, ca, parseCertPEM(t, certPEM), testNow, x509.ExtKeyUsageServerAuth); err != nil {
		t.Fatal(err)
	}

	// Legacy key encodings load too.
	ecKey := ca.Key.(*ecdsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(ca.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})); err != nil {
		t.Errorf("SEC 1 key: %v", err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCA, err := newCAWithKey(rsaKey, "rsa root", time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	if _, err := LoadCA(rsaCA.CertPEM, pkcs1); err != nil {
		t.Errorf("PKCS #1 key: %v", err)
	}

	// A chain: the CA certificate followed by the root above it is kept.
	chained := append(slices.Clone(ca.CertPEM), rsaCA.CertPEM...)
	got, err := LoadCA(chained, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) || !bytes.Equal(got.CertPEM, chained) {
		t.Error("chain not kept in CertPEM")
	}

	leafPEM, leafKey, err := ca.Issue(IssueOptions{CommonName: "leaf", Validity: time.Hour, Client: true, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := testCA(t).KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ cert, key []byte }{
		"empty":              {nil, keyPEM},
		"garbage cert":       {[]byte("not pem"), keyPEM},
		"leaf is not a CA":   {leafPEM, leafKey},
		"mismatched key":     {ca.CertPEM, otherKey},
		"no key":             {ca.CertPEM, nil},
		"key as cert":        {keyPEM, keyPEM},
		"trailing garbage":   {append(slices.Clone(ca.CertPEM), "junk"...), keyPEM},
		"cert where key was": {ca.CertPEM, ca.CertPEM},
	} {
		if _, err := LoadCA(tc.cert, tc.key); !errors.Is(err, ErrInvalidCA) {
			t.Errorf("%s: err = %v, want ErrInvalidCA", name, err)
		}
	}
}

func TestPKIIssue(t *testing.T) {
	ca := testCA(t)
	spiffe, _ := url.Parse("spiffe://cluster.local/ns/default/sa/web")
	for _, tc := range []struct {
		name           string
		opts           IssueOptions
		server, client bool
		wantKey        string
	}{
		{"server ecdsa", IssueOptions{CommonName: "hub", DNSNames: []string{"hub.example"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}, true, false, "ecdsa"},
		{"client spiffe", IssueOptions{URIs: []*url.URL{spiffe}, Client: true}, false, true, "ecdsa"},
		{"both rsa", IssueOptions{CommonName: "peer", Server: true, Client: true, KeyType: KeyRSA2048}, true, true, "rsa"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Validity = time.Hour
			tc.opts.Now = testNow
			certPEM, keyPEM, err := ca.Issue(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			leaf := parseCertPEM(t, certPEM)
			if leaf.IsCA {
				t.Error("leaf is a CA")
			}
			for usage, want := range map[x509.ExtKeyUsage]bool{x509.ExtKeyUsageServerAuth: tc.server, x509.ExtKeyUsageClientAuth: tc.client} {
				err := verifyLeaf(t, ca, leaf, testNow, usage)
				if (err == nil) != want {
					t.Errorf("usage %v: verify err = %v, want ok=%v", usage, err, want)
				}
			}
			if !slices.Equal(leaf.DNSNames, tc.opts.DNSNames) || len(leaf.IPAddresses) != len(tc.opts.IPs) || len(leaf.URIs) != len(tc.opts.URIs) {
				t.Errorf("SANs %v %v %v, want %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.URIs, tc.opts.DNSNames, tc.opts.IPs, tc.opts.URIs)
			}
			if !leaf.NotAfter.Equal(testNow.Add(time.Hour)) || !leaf.NotBefore.Before(testNow) {
				t.Errorf("validity %v..%v", leaf.NotBefore, leaf.NotAfter)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatalf("certificate and key do not pair: %v", err)
			}
			switch pair.PrivateKey.(type) {
			case *ecdsa.PrivateKey:
				if tc.wantKey != "ecdsa" {
					t.Errorf("key is ECDSA, want %s", tc.wantKey)
				}
			case *rsa.PrivateKey:
				if tc.wantKey != "rsa" {
					t.Errorf("key is RSA, want %s", tc.wantKey)
				}
			}
		})
	}

	t.Run("clamped to CA expiry", func(t *testing.T) {
		certPEM, _, err := ca.Issue(IssueOptions{CommonName: "long", Validity: 365 * 24 * time.Hour, Server: true, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		if got := parseCertPEM(t, certPEM).NotAfter; !got.Equal(ca.Cert.NotAfter) {
			t.Errorf("NotAfter %v, want the CA's %v", got, ca.Cert.NotAfter)
		}
	})

	for name, opts := range map[string]IssueOptions{
		"no usage":       {CommonName: "x", Validity: time.Hour, Now: testNow},
		"no identity":    {Validity: time.Hour, Server: true, Now: testNow},
		"no validity":    {CommonName: "x", Server: true, Now: testNow},
		"no time":        {CommonName: "x", Validity: time.Hour, Server: true},
		"nil URI":        {URIs: []*url.URL{nil}, Validity: time.Hour, Server: true, Now: testNow},
		"after CA death": {CommonName: "x", Validity: time.Hour, Server: true, Now: testNow.Add(48 * time.Hour)},
	} {
		if _, _, err := ca.Issue(opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, _, err := ca.Issue(IssueOptions{CommonName: "x", Validity: time.Hour, Server: true, Now: testNow, KeyType: "dsa"}); !errors.Is(err, ErrUnsupportedKey) {
		t.Errorf("unknown key type: err = %v, want ErrUnsupportedKey", err)
	}
}

// newCSR returns a PEM CSR signed by key, asking for an identity the
// signer must ignore.
func newCSR(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	evil, _ := url.Parse("spiffe://cluster.local/ns/kube-system/sa/admin")
	bc, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "admin"},
		DNSNames: []string{"kubernetes.default.svc"},
		URIs:     []*url.URL{evil},
		// Ask for basicConstraints CA:TRUE.
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCSRSignUsesOptionsIdentityOnly(t *testing.T) {
	ca := testCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSR(newCSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := url.Parse("spiffe://cluster.local/ns/default/sa/web")
	certPEM, err := ca.SignCSR(csr, IssueOptions{URIs: []*url.URL{want}, Validity: time.Hour, Server: true, Client: true, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseCertPEM(t, certPEM)
	if leaf.IsCA || len(leaf.DNSNames) != 0 || leaf.Subject.CommonName != "" {
		t.Errorf("CSR identity leaked into the leaf: IsCA=%v DNS=%v CN=%q", leaf.IsCA, leaf.DNSNames, leaf.Subject.CommonName)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want.String() {
		t.Errorf("URIs = %v, want only %v", leaf.URIs, want)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		t.Error("leaf does not certify the CSR's key")
	}
	if err := verifyLeaf(t, ca, leaf, testNow, x509.ExtKeyUsageClientAuth); err != nil {
		t.Error(err)
	}

	// A request whose signature was not made by its key is refused even if
	// the caller skipped ParseCSR.
	forged := *csr
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged.PublicKey = &other.PublicKey
	if _, err := ca.SignCSR(&forged, IssueOptions{CommonName: "x", Validity: time.Hour, Server: true, Now: testNow}); !errors.Is(err, ErrInvalidCSR) {
		t.Errorf("forged CSR: err = %v, want ErrInvalidCSR", err)
	}
	if _, err := ca.SignCSR(nil, IssueOptions{}); !errors.Is(err, ErrInvalidCSR) {
		t.Errorf("nil CSR: err = %v", err)
	}
	if _, err := ca.SignCSR(csr, IssueOptions{CommonName: "x", Validity: time.Hour, Now: testNow}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("bad options: err = %v", err)
	}
}

func TestCSRKeyTypes(t *testing.T) {
	ca := testCA(t)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for name, tc := range map[string]struct {
		key  crypto.Signer
		want error
	}{
		"rsa-1024": {rsa1024, ErrUnsupportedKey},
		"rsa-2048": {rsa2048, nil},
		"p-384":    {p384, nil},
		"ed25519":  {ed, nil},
	} {
		csr, err := ParseCSR(newCSR(t, tc.key))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = ca.SignCSR(csr, IssueOptions{CommonName: "x", Validity: time.Hour, Client: true, Now: testNow})
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
}

func TestCSRParse(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good := newCSR(t, key)
	block, _ := pem.Decode(good)
	der := block.Bytes
	tampered := slices.Clone(der)
	tampered[len(tampered)-1] ^= 0xff

	for name, in := range map[string][]byte{
		"pem":                 good,
		"pem with whitespace": append(append([]byte("\n  "), good...), "\n\n"...),
		"der":                 der,
		"new csr pem":         pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: der}),
	} {
		csr, err := ParseCSR(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !key.PublicKey.Equal(csr.PublicKey) {
			t.Errorf("%s: wrong public key", name)
		}
	}
	for name, in := range map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("hello"),
		"broken pem":     []byte("-----BEGIN CERTIFICATE REQUEST-----\nnot base64\n"),
		"wrong pem type": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"trailing data":  append(slices.Clone(good), "junk"...),
		"bad signature":  tampered,
		"too large":      bytes.Repeat([]byte{0x30}, maxCSRBytes+1),
		"truncated der":  der[:len(der)/2],
	} {
		if _, err := ParseCSR(in); !errors.Is(err, ErrInvalidCSR) {
			t.Errorf("%s: err = %v, want ErrInvalidCSR", name, err)
		}
	}
}

// FuzzParseCSR feeds arbitrary bytes: ParseCSR must never panic, a request
// it accepts must verify, and every refusal must wrap ErrInvalidCSR.
func FuzzParseCSR(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good := newCSR(f, key)
	block, _ := pem.Decode(good)
	f.Add(good)
	f.Add(block.Bytes)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte{0x30, 0x82, 0x01})
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, in []byte) {
		csr, err := ParseCSR(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidCSR) {
				t.Fatalf("error %v does not wrap ErrInvalidCSR", err)
			}
			return
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature fails: %v", err)
		}
	})
}

// The issue benchmarks include generating the leaf's key, which dominates
// for RSA (tens of milliseconds); BenchmarkSignCSR isolates the signature by
// the CA's key, the cost DESIGN.md quotes per leaf.
func benchmarkIssue(b *testing.B, kt KeyType) {
	ca := testCA(b)
	opts := IssueOptions{CommonName: "bench", Validity: time.Hour, Server: true, Client: true, Now: testNow, KeyType: kt}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ca.Issue(opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIssueECDSA(b *testing.B)   { benchmarkIssue(b, KeyECDSAP256) }
func BenchmarkIssueRSA2048(b *testing.B) { benchmarkIssue(b, KeyRSA2048) }

func BenchmarkSignCSR(b *testing.B) {
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := ParseCSR(newCSR(b, leafKey))
	if err != nil {
		b.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	rsaCA, err := newCAWithKey(rsaKey, "rsa root", time.Hour, testNow)
	if err != nil {
		b.Fatal(err)
	}
	spiffe, _ := url.Parse("spiffe://cluster.local/ns/default/sa/web")
	opts := IssueOptions{URIs: []*url.URL{spiffe}, Validity: time.Hour, Server: true, Client: true, Now: testNow}
	for _, c := range []struct {
		name string
		ca   *CA
	}{{"ca=ecdsa-p256", testCA(b)}, {"ca=rsa-2048", rsaCA}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ca.SignCSR(csr, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
