package xdsgen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Credentials: the SDS secrets a gateway's TLS servers (and a
// DestinationRule's credentialName) name, "kubernetes://<name>" for a
// certificate and key and "kubernetes://<name>-cacert" for the CA that
// verifies peers, made from Kubernetes Secrets of the proxy's namespace in
// its own cluster, as istiod makes them.

// Keys of a credential Secret, as Istio reads them.
const (
	// SecretKeyTLSCert and SecretKeyTLSKey: a kubernetes.io/tls Secret.
	SecretKeyTLSCert = "tls.crt"
	SecretKeyTLSKey  = "tls.key"
	// SecretKeyCert and SecretKeyKey: Istio's generic form.
	SecretKeyCert = "cert"
	SecretKeyKey  = "key"
	// SecretKeyCA and SecretKeyCACert: the CA of MUTUAL, in the Secret
	// itself (else in the Secret <name>-cacert).
	SecretKeyCA     = "ca.crt"
	SecretKeyCACert = "cacert"
)

// ErrBadCredential is a credential Secret that cannot be served: missing,
// without the keys, or with a certificate or key that does not parse.
var ErrBadCredential = errors.New("xdsgen: credential")

// CredentialRef is what an SDS name asks for: the Secret Name (in
// Namespace, when the name says "kubernetes://<ns>/<name>"; else the
// proxy's), and whether it is the CA part.
type CredentialRef struct {
	Namespace, Name string
	CA              bool
}

// ParseCredentialName reads an SDS name of a credential:
// kubernetes://[<namespace>/]<name>[-cacert]. It reports false for any
// other name (pilot-agent's "default" and "ROOTCA" are served by the agent
// itself).
func ParseCredentialName(sds string) (CredentialRef, bool) {
	rest, ok := strings.CutPrefix(sds, sdsSecretPrefix)
	if !ok || rest == "" {
		return CredentialRef{}, false
	}
	var ref CredentialRef
	if ns, name, scoped := strings.Cut(rest, "/"); scoped {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return CredentialRef{}, false
		}
		ref.Namespace, rest = ns, name
	}
	ref.Name = rest
	if base, ok := strings.CutSuffix(rest, sdsCACertSuffix); ok && base != "" {
		ref.Name, ref.CA = base, true
	}
	return ref, true
}

// CredentialSecrets are the Secrets, by name, that the SDS secret of ref
// is made from: the Secret itself, and for the CA part the Secret
// <name>-cacert too (read when the first holds no CA).
func (ref CredentialRef) Secrets() []string {
	if ref.CA {
		return []string{ref.Name, ref.Name + sdsCACertSuffix}
	}
	return []string{ref.Name}
}

// CredentialSecret makes the SDS secret sdsName of ref from the data of
// the Secrets it names (Secrets; lookup reports false for one that does
// not exist): a tls_certificate of the certificate chain and key, or a
// validation_context of the CA, inline. The PEM is checked as Envoy would
// (a certificate and key that belong together, a CA that parses), so that
// a bad Secret is an error here, naming it and its keys, not a NACK of the
// proxy. The error never quotes the Secret's data. It is pure.
func CredentialSecret(sdsName string, ref CredentialRef, lookup func(name string) (map[string][]byte, bool)) (*tlsv3.Secret, error) {
	if ref.CA {
		for _, name := range ref.Secrets() {
			data, ok := lookup(name)
			if !ok {
				continue
			}
			ca := firstKey(data, SecretKeyCA, SecretKeyCACert)
			if ca == nil {
				continue
			}
			if !parsesCertificates(ca) {
				return nil, fmt.Errorf("%w: Secret %s: its CA is not PEM certificates", ErrBadCredential, name)
			}
			return &tlsv3.Secret{Name: sdsName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: inlineBytes(ca),
			}}}, nil
		}
		return nil, fmt.Errorf("%w: neither Secret %s nor Secret %s holds %s or %s", ErrBadCredential,
			ref.Name, ref.Name+sdsCACertSuffix, SecretKeyCA, SecretKeyCACert)
	}
	data, ok := lookup(ref.Name)
	if !ok {
		return nil, fmt.Errorf("%w: Secret %s does not exist", ErrBadCredential, ref.Name)
	}
	cert, key := data[SecretKeyTLSCert], data[SecretKeyTLSKey]
	if cert == nil || key == nil {
		cert, key = data[SecretKeyCert], data[SecretKeyKey]
	}
	if cert == nil || key == nil {
		return nil, fmt.Errorf("%w: Secret %s holds neither %s and %s nor %s and %s", ErrBadCredential,
			ref.Name, SecretKeyTLSCert, SecretKeyTLSKey, SecretKeyCert, SecretKeyKey)
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		// The error of X509KeyPair names what is wrong, never the data.
		return nil, fmt.Errorf("%w: Secret %s: its certificate and key: %w", ErrBadCredential, ref.Name, err)
	}
	return &tlsv3.Secret{Name: sdsName, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlineBytes(cert),
		PrivateKey:       inlineBytes(key),
	}}}, nil
}

func firstKey(data map[string][]byte, keys ...string) []byte {
	for _, k := range keys {
		if v, ok := data[k]; ok && len(v) > 0 {
			return v
		}
	}
	return nil
}

func parsesCertificates(pemData []byte) bool {
	return x509.NewCertPool().AppendCertsFromPEM(pemData)
}

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}
