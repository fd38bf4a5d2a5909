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

// servingCert is the CA server's own TLS certificate, issued from its Keys
// on first use and again once half its lifetime has passed.
type servingCert struct {
	keys  *Keys
	clock clock.PassiveClock
	ttl   time.Duration
	dns   []string
	ips   []net.IP

	mu      sync.Mutex // guards cert and renewAt
	cert    *tls.Certificate
	renewAt time.Time
}

// get is tls.Config.GetCertificate.
func (c *servingCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.cert != nil && now.Before(c.renewAt) {
		return c.cert, nil
	}
	certPEM, keyPEM, err := c.keys.CA().Issue(pki.IssueOptions{
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
	for _, p := range c.keys.Chain() {
		certPEM = append(certPEM, p...)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	c.cert, c.renewAt = &cert, now.Add(c.ttl/2)
	return c.cert, nil
}
