package ca

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/pki"
)

// servingCert is the CA server's own TLS certificate, issued from the
// current keys on first use, again once half its lifetime has passed, and
// at once when the keys rotate (workloads learn the new root from the trust
// bundle before the CA signs with it).
type servingCert struct {
	source KeySource
	clock  clock.PassiveClock
	ttl    time.Duration
	dns    []string
	ips    []net.IP

	mu      sync.Mutex // guards cert, keys and renewAt
	cert    *tls.Certificate
	keys    *Keys // that issued cert
	renewAt time.Time
}

// get is tls.Config.GetCertificate.
func (c *servingCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	keys := c.source.Current()
	if c.cert != nil && c.keys == keys && now.Before(c.renewAt) {
		return c.cert, nil
	}
	certPEM, keyPEM, err := keys.CA().Issue(pki.IssueOptions{
		CommonName: "meshfed-ca",
		DNSNames:   c.dns,
		IPs:        c.ips,
		Validity:   c.ttl,
		Server:     true,
		Now:        now,
	})
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	for _, p := range keys.Chain() {
		certPEM = append(certPEM, p...)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	c.cert, c.keys, c.renewAt = &cert, keys, now.Add(c.ttl/2)
	return c.cert, nil
}
