package ca

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/pki"
)

// Secrets of the config cluster that hold the signing CA, named as Istio
// names them so an operator's existing habits and tooling carry over.
const (
	// PluginSecret is Istio's plug-in CA Secret: an operator-provided
	// (usually intermediate) CA. When present it is used, and nothing is
	// written.
	PluginSecret = "cacerts"
	// SelfSignedSecret holds the self-signed root the hub creates when no
	// PluginSecret exists; the first replica writes it, the others read it.
	SelfSignedSecret = "istio-ca-secret"
)

// Data keys of PluginSecret and SelfSignedSecret.
const (
	// KeyCACert is the signing CA's certificate.
	KeyCACert = "ca-cert.pem"
	// KeyCAKey is the signing CA's private key.
	KeyCAKey = "ca-key.pem"
	// KeyRootCert holds the root certificate(s) workloads trust; more than
	// one during a root rotation.
	KeyRootCert = "root-cert.pem"
	// KeyCertChain is the chain from the signing CA up to the root
	// (PluginSecret only).
	KeyCertChain = "cert-chain.pem"
)

// selfSignedSecretType is the Secret type Istio gives istio-ca-secret.
const selfSignedSecretType corev1.SecretType = "istio.io/ca-root"

// createAttempts bounds LoadOrCreateKeys' read-create loop. Two suffice
// (lose the race once, then read the winner's); the third covers a winner's
// Secret deleted in between.
const createAttempts = 3

// Errors of the signing keys.
var (
	// ErrInvalidCASecret means a CA Secret exists but cannot be used: a
	// missing key, a certificate that is not a CA, a key that does not
	// match, or a CA that does not chain to the roots. The hub refuses to
	// start rather than fall back to another CA, which would split the
	// fleet's trust.
	ErrInvalidCASecret = errors.New("ca: invalid CA secret")
	// ErrKeysUnavailable means the CA Secrets could be neither read nor
	// created.
	ErrKeysUnavailable = errors.New("ca: CA keys unavailable")
)

// KeyOptions describe the self-signed root created when the config cluster
// has no CA yet. DefaultKeyOptions gives the defaults.
type KeyOptions struct {
	// TrustDomain is written into the root's common name, so an operator
	// can tell roots of different meshes apart. Default cluster.local.
	TrustDomain pki.TrustDomain
	// RootValidity is the lifetime of a self-signed root. Default ten
	// years, Istio's default (CITADEL_SELF_SIGNED_CA_CERT_TTL): a root is
	// rotated deliberately, not by expiry.
	RootValidity time.Duration
}

// DefaultKeyOptions returns the defaults of KeyOptions.
func DefaultKeyOptions() KeyOptions {
	return KeyOptions{TrustDomain: DefaultTrustDomain, RootValidity: 10 * 365 * 24 * time.Hour}
}

func (o KeyOptions) withDefaults() KeyOptions {
	d := DefaultKeyOptions()
	if o.TrustDomain == "" {
		o.TrustDomain = d.TrustDomain
	}
	if o.RootValidity == 0 {
		o.RootValidity = d.RootValidity
	}
	return o
}

// Keys is the CA that signs workload certificates, with what a workload
// needs to verify them. It is immutable and safe for concurrent use.
type Keys struct {
	ca            *pki.CA
	intermediates []string // PEM, issuing CA first; empty when it is a root
	rootsPEM      []byte
	roots         *x509.CertPool
	rootCerts     []*x509.Certificate
	// signingRoots are the fingerprints of the roots the CA chains to:
	// the roots under which its leaves verify.
	signingRoots []string
	source       string
}

// Current returns k itself: fixed Keys are a KeySource.
func (k *Keys) Current() *Keys { return k }

// CA is the signer of workload leaves.
func (k *Keys) CA() *pki.CA { return k.ca }

// Chain returns the certificates between a leaf and the roots, one PEM
// string each, issuing CA first. It is empty when the issuing CA is itself
// a root (the self-signed case). The caller must not modify it.
func (k *Keys) Chain() []string { return k.intermediates }

// RootsPEM returns the root certificates workloads trust, concatenated PEM:
// what Istio distributes as root-cert.pem. The caller must not modify it.
func (k *Keys) RootsPEM() []byte { return k.rootsPEM }

// Roots returns a new pool of the root certificates.
func (k *Keys) Roots() *x509.CertPool { return k.roots.Clone() }

// Source names where the keys came from, "<namespace>/<secret>", or
// "memory" for KeysFromPEM.
func (k *Keys) Source() string { return k.source }

// KeysFromPEM assembles Keys from the contents of an Istio CA Secret:
// certPEM and keyPEM are the signing CA (ca-cert.pem, ca-key.pem), chainPEM
// the optional chain from it up to the root (cert-chain.pem), rootsPEM the
// roots (root-cert.pem). An empty rootsPEM means the CA is its own root, as
// in a self-signed istio-ca-secret written by Istio. The CA must chain to a
// root at now.
func KeysFromPEM(certPEM, keyPEM, chainPEM, rootsPEM []byte, now time.Time) (*Keys, error) {
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCASecret, err)
	}
	if len(bytes.TrimSpace(rootsPEM)) == 0 {
		rootsPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
	}
	roots, err := parseCerts(rootsPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCASecret, KeyRootCert, err)
	}
	chain, err := parseCerts(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCASecret, KeyCertChain, err)
	}
	// The chain sent to workloads: the issuing CA and what is above it,
	// stopping at the first root. ca-cert.pem may itself carry the chain
	// (pki.LoadCA keeps it), and cert-chain.pem usually repeats the CA.
	above, err := parseCerts(ca.CertPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCASecret, KeyCACert, err)
	}
	isRoot := func(c *x509.Certificate) bool {
		for _, r := range roots {
			if r.Equal(c) {
				return true
			}
		}
		return false
	}
	var inter []*x509.Certificate
	seen := func(c *x509.Certificate) bool {
		for _, i := range inter {
			if i.Equal(c) {
				return true
			}
		}
		return false
	}
	for _, c := range append(above, chain...) {
		if isRoot(c) {
			break
		}
		if !seen(c) {
			inter = append(inter, c)
		}
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	mid := x509.NewCertPool()
	for _, c := range inter {
		mid.AddCert(c)
	}
	chains, err := ca.Cert.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: mid, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: CA %q does not chain to the roots: %w", ErrInvalidCASecret, ca.Cert.Subject, err)
	}
	k := &Keys{ca: ca, roots: pool, rootCerts: roots, source: "memory"}
	for _, c := range chains {
		if fp := Fingerprint(c[len(c)-1]); !slices.Contains(k.signingRoots, fp) {
			k.signingRoots = append(k.signingRoots, fp)
		}
	}
	for _, c := range inter {
		k.intermediates = append(k.intermediates, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})))
	}
	for _, r := range roots {
		k.rootsPEM = append(k.rootsPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})...)
	}
	return k, nil
}

// Fingerprint is the lower-case hex SHA-256 of a certificate's DER, as the
// federated trust bundle names roots.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// RootFingerprints returns the fingerprints of the roots, in RootsPEM order.
func (k *Keys) RootFingerprints() []string {
	out := make([]string, 0, len(k.rootCerts))
	for _, r := range k.rootCerts {
		out = append(out, Fingerprint(r))
	}
	return out
}

// SigningRoots returns the fingerprints of the roots the signing CA chains
// to: the roots a leaf signed now is verified with.
func (k *Keys) SigningRoots() []string { return slices.Clone(k.signingRoots) }

// rootPEM returns the PEM of the root of fingerprint fp, nil if k has none.
func (k *Keys) rootPEM(fp string) []byte {
	for _, r := range k.rootCerts {
		if Fingerprint(r) == fp {
			return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})
		}
	}
	return nil
}

// signingRootsExpiry returns when the first of the signing roots expires.
func (k *Keys) signingRootsExpiry() time.Time {
	var first time.Time
	for _, r := range k.rootCerts {
		if slices.Contains(k.signingRoots, Fingerprint(r)) && (first.IsZero() || r.NotAfter.Before(first)) {
			first = r.NotAfter
		}
	}
	return first
}

// Equal reports whether k and o sign with the same CA, send the same chain
// and trust the same roots.
func (k *Keys) Equal(o *Keys) bool {
	return k.ca.Cert.Equal(o.ca.Cert) && slices.Equal(k.intermediates, o.intermediates) && bytes.Equal(k.rootsPEM, o.rootsPEM)
}

// withRoots returns a copy of k that also trusts the roots of o (after its
// own, each once): the keys of a staged rotation, still signing with k's CA
// while o's roots spread.
func (k *Keys) withRoots(o *Keys) *Keys {
	out := *k
	out.rootsPEM = bytes.Clone(k.rootsPEM)
	out.rootCerts = slices.Clone(k.rootCerts)
	out.roots = k.roots.Clone()
	for _, r := range o.rootCerts {
		if slices.ContainsFunc(out.rootCerts, r.Equal) {
			continue
		}
		out.rootCerts = append(out.rootCerts, r)
		out.roots.AddCert(r)
		out.rootsPEM = append(out.rootsPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})...)
	}
	return &out
}

// LoadOrCreateKeys returns the signing CA kept in namespace ns of the
// config cluster that c talks to: Istio's plug-in Secret "cacerts" if
// present, else the self-signed root in "istio-ca-secret", created here if
// absent. Replicas racing to create it all end with the same root: Create
// fails for all but one, and the others read the winner's. c needs get on
// both Secrets and create on the second.
func LoadOrCreateKeys(ctx context.Context, c client.Client, ns string, now time.Time, opts KeyOptions) (*Keys, error) {
	opts = opts.withDefaults()
	var plugin corev1.Secret
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: PluginSecret}, &plugin); {
	case err == nil:
		return keysFromSecret(&plugin, now)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: reading %s/%s: %w", ErrKeysUnavailable, ns, PluginSecret, err)
	}
	key := client.ObjectKey{Namespace: ns, Name: SelfSignedSecret}
	for range createAttempts {
		var sec corev1.Secret
		err := c.Get(ctx, key, &sec)
		if err == nil {
			return keysFromSecret(&sec, now)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: reading %s: %w", ErrKeysUnavailable, key, err)
		}
		root, err := pki.NewCA("meshfed root CA "+opts.TrustDomain.String(), opts.RootValidity, now)
		if err != nil {
			return nil, fmt.Errorf("%w: new root: %w", ErrKeysUnavailable, err)
		}
		keyPEM, err := root.KeyPEM()
		if err != nil {
			return nil, fmt.Errorf("%w: new root: %w", ErrKeysUnavailable, err)
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SelfSignedSecret,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "meshfed-hub"}},
			Type: selfSignedSecretType,
			Data: map[string][]byte{KeyCACert: root.CertPEM, KeyCAKey: keyPEM, KeyRootCert: root.CertPEM},
		}
		switch err := c.Create(ctx, &sec); {
		case err == nil:
			return keysFromSecret(&sec, now)
		case apierrors.IsAlreadyExists(err):
			continue // another replica won the race: read its root
		default:
			return nil, fmt.Errorf("%w: creating %s: %w", ErrKeysUnavailable, key, err)
		}
	}
	return nil, fmt.Errorf("%w: %s neither readable nor creatable after %d attempts", ErrKeysUnavailable, key, createAttempts)
}

func keysFromSecret(sec *corev1.Secret, now time.Time) (*Keys, error) {
	name := sec.Namespace + "/" + sec.Name
	for _, k := range []string{KeyCACert, KeyCAKey} {
		if len(sec.Data[k]) == 0 {
			return nil, fmt.Errorf("%w: %s has no %s", ErrInvalidCASecret, name, k)
		}
	}
	if sec.Name == PluginSecret && len(sec.Data[KeyRootCert]) == 0 {
		// A plug-in CA is usually an intermediate: without its roots the
		// workloads could not verify what it signs.
		return nil, fmt.Errorf("%w: %s has no %s", ErrInvalidCASecret, name, KeyRootCert)
	}
	k, err := KeysFromPEM(sec.Data[KeyCACert], sec.Data[KeyCAKey], sec.Data[KeyCertChain], sec.Data[KeyRootCert], now)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	k.source = name
	return k, nil
}

// parseCerts reads every PEM certificate of data; data may be empty.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out), err)
		}
		out = append(out, c)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("trailing data after the PEM certificates")
	}
	return out, nil
}
