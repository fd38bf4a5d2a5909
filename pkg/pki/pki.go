package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// Errors that name why an operation was refused. Returned errors wrap one of
// them; test with errors.Is.
var (
	// ErrInvalidOptions means IssueOptions (or NewCA's arguments) cannot
	// make a usable certificate.
	ErrInvalidOptions = errors.New("pki: invalid options")
	// ErrInvalidCA means LoadCA was given a certificate or key that cannot
	// act as a CA.
	ErrInvalidCA = errors.New("pki: invalid CA")
	// ErrInvalidCSR means ParseCSR was given something that is not a
	// well-formed, correctly self-signed certificate signing request.
	ErrInvalidCSR = errors.New("pki: invalid certificate signing request")
	// ErrUnsupportedKey means a public or private key is of a type or size
	// the package will not certify or use.
	ErrUnsupportedKey = errors.New("pki: unsupported key")
)

// KeyType selects the algorithm of a key the package generates.
type KeyType string

// Key types. The zero value means KeyECDSAP256.
const (
	// KeyECDSAP256 is ECDSA on the NIST P-256 curve: the default, since it
	// signs about ten times faster than RSA-2048 and its keys and
	// signatures are a fraction of the size.
	KeyECDSAP256 KeyType = "ecdsa-p256"
	// KeyRSA2048 is RSA with a 2048-bit modulus, for peers that need RSA.
	// Generating one costs tens of milliseconds.
	KeyRSA2048 KeyType = "rsa-2048"
)

func (k KeyType) String() string {
	if k == "" {
		return string(KeyECDSAP256)
	}
	return string(k)
}

const (
	// clockSkew backdates NotBefore, so that a certificate is valid at once
	// on a machine whose clock is a little behind the signer's.
	clockSkew = 5 * time.Minute
	// maxCSRBytes bounds the input of ParseCSR. Real CSRs are well under
	// 4 KiB (RSA-4096 with a few SANs); the bound keeps a hostile caller
	// from making the parser chew on megabytes.
	maxCSRBytes = 64 << 10
	// minRSABits is the smallest RSA modulus SignCSR certifies.
	minRSABits = 2048
)

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
	pemECKey       = "EC PRIVATE KEY"
	pemRSAKey      = "RSA PRIVATE KEY"
	pemCSR         = "CERTIFICATE REQUEST"
	pemCSRNew      = "NEW CERTIFICATE REQUEST"
)

// CA is a certificate authority: a CA certificate and its signing key.
// A CA is safe for concurrent use as long as its fields are not modified.
type CA struct {
	// Cert is the CA certificate that signs leaves.
	Cert *x509.Certificate
	// Key is the private key of Cert.
	Key crypto.Signer
	// CertPEM is Cert in PEM form, followed by the certificates above it
	// when LoadCA was given a chain (an intermediate CA). A verifier that
	// trusts only the root needs a leaf followed by CertPEM.
	CertPEM []byte
}

// NewCA creates a self-signed root CA with a new ECDSA P-256 key, valid from
// now (backdated a few minutes for clock skew) for validity. The root may
// sign leaves only, not further CAs (path length 0).
func NewCA(commonName string, validity time.Duration, now time.Time) (*CA, error) {
	key, err := generateKey(KeyECDSAP256)
	if err != nil {
		return nil, err
	}
	return newCAWithKey(key, commonName, validity, now)
}

// newCAWithKey creates a self-signed root CA for key.
func newCAWithKey(key crypto.Signer, commonName string, validity time.Duration, now time.Time) (*CA, error) {
	if commonName == "" {
		return nil, fmt.Errorf("%w: CA common name is empty", ErrInvalidOptions)
	}
	if validity <= 0 {
		return nil, fmt.Errorf("%w: CA validity %v is not positive", ErrInvalidOptions, validity)
	}
	if now.IsZero() {
		return nil, fmt.Errorf("%w: CA creation time is zero", ErrInvalidOptions)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse new CA: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodePEM(pemCertificate, der)}, nil
}

// LoadCA reads a CA from PEM: certPEM holds the CA certificate first,
// optionally followed by the certificates above it (up to the root); keyPEM
// holds its private key as PKCS #8, SEC 1 ("EC PRIVATE KEY") or PKCS #1
// ("RSA PRIVATE KEY"). The certificate must be a CA allowed to sign
// certificates, and the key must match it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	var chain []*x509.Certificate
	var out bytes.Buffer
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			return nil, fmt.Errorf("%w: unexpected PEM block %q in certificate", ErrInvalidCA, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: certificate %d: %w", ErrInvalidCA, len(chain), err)
		}
		chain = append(chain, c)
		out.Write(encodePEM(pemCertificate, block.Bytes))
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no PEM certificate found", ErrInvalidCA)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: trailing data after the certificates", ErrInvalidCA)
	}
	cert := chain[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("%w: certificate %q is not a CA", ErrInvalidCA, cert.Subject)
	}
	// KeyUsage 0 means the extension is absent, which permits any use.
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: certificate %q may not sign certificates", ErrInvalidCA, cert.Subject)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCA, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("%w: private key does not match certificate %q", ErrInvalidCA, cert.Subject)
	}
	return &CA{Cert: cert, Key: key, CertPEM: out.Bytes()}, nil
}

// KeyPEM returns the CA's private key as a PKCS #8 PEM block. It fails when
// the key cannot be exported (a crypto.Signer backed by a KMS or HSM).
func (ca *CA) KeyPEM() ([]byte, error) {
	return marshalPrivateKey(ca.Key)
}

// IssueOptions describe a leaf certificate.
type IssueOptions struct {
	// CommonName is the subject common name. Modern verifiers ignore it in
	// favour of the SANs below; it is kept for humans reading the
	// certificate.
	CommonName string
	// DNSNames, IPs and URIs are the subject alternative names: the
	// identity the certificate proves. A SPIFFE ID is a URI.
	DNSNames []string
	IPs      []net.IP
	URIs     []*url.URL
	// Validity is how long the leaf is valid from Now. It is cut to the
	// CA's own expiry, since a leaf cannot outlive its issuer.
	Validity time.Duration
	// Server and Client set the extended key usages TLS checks: serverAuth
	// and clientAuth. At least one is required; a leaf with no extended
	// key usage would be accepted for any purpose.
	Server, Client bool
	// Now is the issue time (NotBefore is backdated a few minutes for
	// clock skew). Required: the package reads no clock.
	Now time.Time
	// KeyType is the algorithm of the key Issue generates; empty means
	// KeyECDSAP256. SignCSR ignores it (the CSR carries the key).
	KeyType KeyType
}

func (o *IssueOptions) validate() error {
	if o.Validity <= 0 {
		return fmt.Errorf("%w: validity %v is not positive", ErrInvalidOptions, o.Validity)
	}
	if o.Now.IsZero() {
		return fmt.Errorf("%w: issue time (Now) is zero", ErrInvalidOptions)
	}
	if !o.Server && !o.Client {
		return fmt.Errorf("%w: neither server nor client usage requested", ErrInvalidOptions)
	}
	if o.CommonName == "" && len(o.DNSNames) == 0 && len(o.IPs) == 0 && len(o.URIs) == 0 {
		return fmt.Errorf("%w: no identity (common name or SAN)", ErrInvalidOptions)
	}
	for _, u := range o.URIs {
		if u == nil {
			return fmt.Errorf("%w: nil URI SAN", ErrInvalidOptions)
		}
	}
	return nil
}

// Issue generates a key of opts.KeyType and a leaf certificate for it
// signed by the CA. It returns the certificate (the leaf alone) and the key
// (PKCS #8), both PEM.
func (ca *CA) Issue(opts IssueOptions) (certPEM, keyPEM []byte, err error) {
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	key, err := generateKey(opts.KeyType)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = ca.sign(key.Public(), opts)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = marshalPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// SignCSR issues a leaf certificate (PEM) for the public key of csr. The
// CSR's signature is checked again, so a caller cannot certify a key whose
// holder did not ask.
//
// The certificate's identity comes from opts alone: the subject, SANs and
// extensions of the CSR are ignored. A CSR is written by the requester and
// proves only that it holds the private key; what it says about its own
// identity is a claim. The caller (the hub's CA service) establishes the
// identity from an authenticated source (a Kubernetes TokenReview of the
// caller's token) and passes it here. Copying SANs from the CSR would let
// any workload obtain a certificate for any SPIFFE ID, and copying its
// extensions could mint a CA.
func (ca *CA) SignCSR(csr *x509.CertificateRequest, opts IssueOptions) ([]byte, error) {
	if csr == nil {
		return nil, fmt.Errorf("%w: nil request", ErrInvalidCSR)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %w", ErrInvalidCSR, err)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	return ca.sign(csr.PublicKey, opts)
}

// sign makes the leaf certificate for pub described by opts (validated).
func (ca *CA) sign(pub crypto.PublicKey, opts IssueOptions) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := opts.Now.Add(opts.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	notBefore := opts.Now.Add(-clockSkew)
	if !notAfter.After(opts.Now) {
		return nil, fmt.Errorf("%w: the CA expires at %v, before the leaf would start", ErrInvalidOptions, ca.Cert.NotAfter)
	}
	usage := x509.KeyUsageDigitalSignature
	if _, ok := pub.(*rsa.PublicKey); ok {
		// TLS 1.2 RSA key exchange encrypts to the certificate's key.
		usage |= x509.KeyUsageKeyEncipherment
	}
	var ext []x509.ExtKeyUsage
	if opts.Server {
		ext = append(ext, x509.ExtKeyUsageServerAuth)
	}
	if opts.Client {
		ext = append(ext, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: opts.CommonName},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           ext,
		BasicConstraintsValid: true,
		IsCA:                  false,
		DNSNames:              opts.DNSNames,
		IPAddresses:           opts.IPs,
		URIs:                  opts.URIs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign leaf %q: %w", opts.CommonName, err)
	}
	return encodePEM(pemCertificate, der), nil
}

// ParseCSR reads a PKCS #10 certificate signing request, PEM ("CERTIFICATE
// REQUEST") or DER, and checks that it is signed by the key it carries.
func ParseCSR(pemOrDER []byte) (*x509.CertificateRequest, error) {
	if len(pemOrDER) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidCSR)
	}
	if len(pemOrDER) > maxCSRBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrInvalidCSR, len(pemOrDER), maxCSRBytes)
	}
	der := pemOrDER
	if trimmed := bytes.TrimSpace(pemOrDER); bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
		block, rest := pem.Decode(trimmed)
		if block == nil {
			return nil, fmt.Errorf("%w: malformed PEM", ErrInvalidCSR)
		}
		if block.Type != pemCSR && block.Type != pemCSRNew {
			return nil, fmt.Errorf("%w: PEM block is %q, want %q", ErrInvalidCSR, block.Type, pemCSR)
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("%w: trailing data after the PEM block", ErrInvalidCSR)
		}
		der = block.Bytes
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature does not verify with the request's key: %w", ErrInvalidCSR, err)
	}
	return csr, nil
}

// generateKey makes a private key of type kt.
func generateKey(kt KeyType) (crypto.Signer, error) {
	switch kt {
	case "", KeyECDSAP256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("pki: generate %s key: %w", KeyECDSAP256, err)
		}
		return k, nil
	case KeyRSA2048:
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, fmt.Errorf("pki: generate %s key: %w", KeyRSA2048, err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("%w: key type %q", ErrUnsupportedKey, string(kt))
	}
}

// checkPublicKey refuses keys too weak (or too odd) to certify.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("%w: ECDSA curve %s", ErrUnsupportedKey, k.Curve.Params().Name)
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("%w: RSA key of %d bits, fewer than %d", ErrUnsupportedKey, k.N.BitLen(), minRSABits)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("%w: public key type %T", ErrUnsupportedKey, pub)
	}
}

// newSerial returns a random positive 128-bit serial number: unique without
// coordination between replicas that share a CA.
func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil // never zero
}

func encodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func marshalPrivateKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: export private key: %w", ErrUnsupportedKey, err)
	}
	return encodePEM(pemPrivateKey, der), nil
}

// parsePrivateKey reads the first PEM private key block of keyPEM.
func parsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key found")
	}
	var key any
	var err error
	switch block.Type {
	case pemPrivateKey:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case pemECKey:
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case pemRSAKey:
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q for a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: private key type %T cannot sign", ErrUnsupportedKey, key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
