package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/pkg/trustapi"
)

// ErrInvalidBundle means the CA sent a trust bundle the agent refuses:
// without roots, or with a root that is not one PEM certificate. The agent
// keeps the roots it had.
var ErrInvalidBundle = errors.New("agent: invalid trust bundle")

// watchRoots keeps a trust bundle stream open on cc until ctx ends,
// reconnecting with the backoff of certificate requests (RetryInitial
// doubling up to RetryMax, back to RetryInitial once a stream delivered a
// bundle). A CA without the service (codes.Unimplemented: istiod, older
// hubs) ends it for good: the roots then come with the certificates alone.
func (a *Agent) watchRoots(ctx context.Context, cc grpc.ClientConnInterface, log logr.Logger) {
	retry := a.opts.RetryInitial
	for {
		got, err := a.watchOnce(ctx, cc, log)
		switch {
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.Unimplemented:
			log.Info("the CA serves no trust bundle; roots are updated at renewal only", "err", err.Error())
			return
		}
		if got {
			retry = a.opts.RetryInitial
		}
		wait := retry
		retry = min(2*retry, a.opts.RetryMax)
		log.Info("trust bundle stream ended; reconnecting", "err", errString(err), "retryIn", wait)
		t := a.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// watchOnce runs one Watch stream, with a fresh token, until it fails; got
// reports whether a bundle was handled. Bundles the agent refuses are
// logged and skipped: the CA would send the same again on a new stream.
func (a *Agent) watchOnce(ctx context.Context, cc grpc.ClientConnInterface, log logr.Logger) (got bool, err error) {
	token, err := a.opts.TokenFunc(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if token == "" {
		return false, fmt.Errorf("%w: empty token", ErrToken)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx,
		trustapi.MetadataAuthorization, "Bearer "+token,
		trustapi.MetadataClusterID, a.opts.ClusterID,
		trustapi.MetadataClient, trustapi.ClientAgent)
	st, err := trustapi.Watch(ctx, cc)
	if err != nil {
		return false, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return got, err
		}
		b, err := trustapi.Decode(m)
		if err != nil {
			log.Error(fmt.Errorf("%w: %w", ErrInvalidBundle, err), "trust bundle refused; keeping the roots")
			continue
		}
		roots, err := parseBundle(b)
		if err != nil {
			log.Error(err, "trust bundle refused; keeping the roots", "version", b.Version)
			continue
		}
		written, err := a.publishBundle(roots)
		if err != nil {
			// A new stream brings the bundle again, and with it another
			// attempt to write.
			return got, err
		}
		got = true
		if written {
			log.Info("trust bundle changed the roots", "version", b.Version, "roots", len(roots))
		} else {
			log.V(1).Info("trust bundle received", "version", b.Version, "roots", len(roots))
		}
	}
}

// publishBundle makes roots, from a trust bundle, the newest roots: they
// are trusted for the CA at once and, when they differ from the roots of
// the current certificate, written with it as a new generation (the same
// certificate and key). Before the first certificate there is nothing to
// write: it brings roots of its own, newer than these.
func (a *Agent) publishBundle(roots []*x509.Certificate) (written bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bundleRoots = roots
	a.refreshTrustLocked()
	cur := a.current.Load()
	if cur == nil || sameCerts(a.writtenRoots, roots) {
		return false, nil
	}
	b := &Bundle{CertChainPEM: cur.CertChainPEM, KeyPEM: cur.KeyPEM, RootsPEM: encodeCerts(roots), Leaf: cur.Leaf}
	if err := a.writeLocked(b); err != nil {
		return false, err
	}
	a.current.Store(b)
	a.writtenRoots = roots
	a.rootsUpdated.Add(1)
	return true, nil
}

// refreshTrustLocked rebuilds the pool the CA is verified with: CARoots
// and the latest roots of both sources. Both, not only the newest: the CA
// may answer a CreateCertificate with its own roots while its serving
// certificate already chains to a root only the bundle announced. A root
// retired from both sources is no longer trusted.
func (a *Agent) refreshTrustLocked() {
	pool := a.opts.CARoots.Clone()
	for _, c := range a.csrRoots {
		pool.AddCert(c)
	}
	for _, c := range a.bundleRoots {
		pool.AddCert(c)
	}
	a.trust.Store(pool)
}

// verifyCA is the tls.Config.VerifyConnection of the connection to the CA.
// It does what crypto/tls does with RootCAs and ServerName, but with the
// roots of the moment: a tls.Config's RootCAs cannot change once gRPC has
// it, and the CA's serving certificate may move to a root the agent learnt
// only from the trust bundle.
func (a *Agent) verifyCA(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("agent: the CA sent no certificate")
	}
	mid := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		mid.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName:       a.serverName,
		Roots:         a.trust.Load(),
		Intermediates: mid,
		CurrentTime:   a.opts.Clock.Now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("agent: the CA's certificate: %w", err)
	}
	return nil
}

// hostOf returns the host of a gRPC target, host:port or
// scheme://[authority]/host:port, as gRPC derives the TLS server name.
func hostOf(target string) string {
	endpoint := target
	if _, rest, ok := strings.Cut(target, "://"); ok {
		if _, ep, ok := strings.Cut(rest, "/"); ok {
			endpoint = ep
		}
	}
	if host, _, err := net.SplitHostPort(endpoint); err == nil {
		return host
	}
	return endpoint
}

// parseBundle returns the roots of b, without duplicates: at least one,
// each one PEM certificate.
func parseBundle(b trustapi.Bundle) ([]*x509.Certificate, error) {
	if len(b.Roots) == 0 {
		return nil, fmt.Errorf("%w: no roots", ErrInvalidBundle)
	}
	var out []*x509.Certificate
	for _, r := range b.Roots {
		block, rest := pem.Decode([]byte(r.PEM))
		if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("%w: root %q is not one PEM certificate", ErrInvalidBundle, r.Fingerprint)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: root %q: %w", ErrInvalidBundle, r.Fingerprint, err)
		}
		if !slices.ContainsFunc(out, c.Equal) {
			out = append(out, c)
		}
	}
	return out, nil
}

// sameCerts reports whether a and b hold the same certificates, in any
// order.
func sameCerts(a, b []*x509.Certificate) bool {
	key := func(cs []*x509.Certificate) []string {
		out := make([]string, 0, len(cs))
		for _, c := range cs {
			out = append(out, string(c.Raw))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(key(a), key(b))
}

// encodeCerts is the PEM of cs, concatenated.
func encodeCerts(cs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range cs {
		buf.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return buf.Bytes()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
