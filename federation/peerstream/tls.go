package peerstream

// Peer identities: SPIFFE IDs of replicas and the mutual TLS between them.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/pki"
)

// ReplicaURI is the SPIFFE ID of replica id in trustDomain:
// spiffe://<trust-domain>/meshfed/replica/<id>. The path cannot collide
// with workload IDs (spiffe://<trust-domain>/ns/<ns>/sa/<sa>), so a CA
// that signs both cannot be tricked into a workload posing as a replica.
func ReplicaURI(trustDomain pki.TrustDomain, id federation.ReplicaID) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain.String(), Path: peerURIPrefix + string(id)}
}

// ReplicaFromCertificate returns the replica a peer certificate names. The
// certificate must have exactly one URI SAN (as a SPIFFE X.509-SVID does),
// a replica SPIFFE ID (ReplicaURI), of trustDomain unless that is empty.
func ReplicaFromCertificate(cert *x509.Certificate, trustDomain pki.TrustDomain) (federation.ReplicaID, error) {
	if cert == nil {
		return "", fmt.Errorf("%w: no certificate", ErrPeerIdentity)
	}
	if len(cert.URIs) != 1 {
		return "", fmt.Errorf("%w: certificate %q has %d URI SANs, want one replica SPIFFE ID", ErrPeerIdentity, cert.Subject, len(cert.URIs))
	}
	u := cert.URIs[0]
	if u.Scheme != "spiffe" || u.Host == "" || u.Opaque != "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: %q is not a SPIFFE ID", ErrPeerIdentity, u)
	}
	if trustDomain != "" && u.Host != trustDomain.String() {
		return "", fmt.Errorf("%w: %q is not in trust domain %q", ErrPeerIdentity, u, trustDomain)
	}
	name, ok := strings.CutPrefix(u.Path, peerURIPrefix)
	if !ok || u.RawPath != "" {
		return "", fmt.Errorf("%w: %q is not a replica ID (spiffe://<trust-domain>%s<id>)", ErrPeerIdentity, u, peerURIPrefix)
	}
	id := federation.ReplicaID(name)
	if err := id.Validate(); err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrPeerIdentity, u, err)
	}
	return id, nil
}

// checkTrustDomain applies the SPIFFE rule: lower-case letters, digits,
// '.', '-' and '_'.
func checkTrustDomain(td pki.TrustDomain) error { return td.Validate() }

// PeerCertificate issues replica id a certificate for the peer transport,
// signed by ca: both server and client usage, the SPIFFE ID
// ReplicaURI(DefaultPeerTrustDomain, id) as the only URI SAN, valid for
// DefaultPeerCertValidity from now. The chain includes ca's certificates
// when ca is not a root.
func PeerCertificate(ca *pki.CA, id federation.ReplicaID, now time.Time) (tls.Certificate, error) {
	if err := id.Validate(); err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: %w", ErrPeerIdentity, err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{
		CommonName: string(id),
		URIs:       []*url.URL{ReplicaURI(DefaultPeerTrustDomain, id)},
		Validity:   DefaultPeerCertValidity,
		Server:     true,
		Client:     true,
		Now:        now,
	})
	if err != nil {
		return tls.Certificate{}, err
	}
	if !bytes.Equal(ca.Cert.RawIssuer, ca.Cert.RawSubject) {
		certPEM = append(certPEM, ca.CertPEM...)
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// PeerTLS returns the TLS configurations of the peer transport for a
// replica holding cert, trusting the CAs in ca.
//
// The server requires a client certificate that verifies against ca for
// client use. The client verifies the server's chain against ca for server
// use but not a host name: replicas are named by the SPIFFE ID in their
// certificates, not by the address dialed, and Peers checks that ID for
// every stream. Use the client configuration only with Peers.
func PeerTLS(ca *x509.CertPool, cert tls.Certificate) (server, client *tls.Config) {
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		// Go's own verification checks the host name, which replica
		// certificates do not carry; VerifyConnection verifies the chain
		// instead, and Peers the replica ID.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPeerChain(cs, ca)
		},
	}
	return server, client
}

// verifyPeerChain verifies the server's chain against roots, for server
// use.
func verifyPeerChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: server presented no certificate", ErrPeerIdentity)
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("%w: server certificate: %w", ErrPeerIdentity, err)
	}
	return nil
}

// LoadPeerTLS reads the peer TLS files (the --peer-tls-cert, -key and -ca
// flags): this replica's certificate chain and key, PEM, and the CA
// certificates to trust, PEM. The certificate must carry a replica SPIFFE
// ID (ReplicaURI). The files are read once; rotating them needs a restart.
func LoadPeerTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("federation: peer certificate: %w", err)
	}
	leaf := cert.Leaf
	if leaf == nil { // GODEBUG=x509keypairleaf=0
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("federation: peer certificate: %w", err)
		}
	}
	if _, err := ReplicaFromCertificate(leaf, ""); err != nil {
		return nil, nil, fmt.Errorf("federation: peer certificate %s: %w", certFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("federation: peer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("federation: peer CA %s holds no PEM certificate", caFile)
	}
	server, client = PeerTLS(pool, cert)
	return server, client, nil
}
