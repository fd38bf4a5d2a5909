package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/meshfed/meshfed/pkg/agent"
)

// DialAuthenticatedXDS dials the hub's CA port, where ADS and CSDS are
// authenticated, with TLS as pilot-agent does: the serving certificate
// verified against roots for serverName, cert (when not nil) presented as
// the client certificate. Tokens go in each call's metadata.
func (h *Hub) DialAuthenticatedXDS(roots *x509.CertPool, serverName string, cert *tls.Certificate) (*grpc.ClientConn, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	cc, err := grpc.NewClient(h.CAAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, fmt.Errorf("framework: dialing hub %s CA port: %w", h.id, err)
	}
	return cc, nil
}

// Certificate returns the workload certificate the agent keeps, with its
// key, as a TLS client certificate.
func (a *CertAgent) Certificate() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(filepath.Join(a.dir, agent.CertChainFile), filepath.Join(a.dir, agent.KeyFile))
	if err != nil {
		return nil, fmt.Errorf("framework: agent certificate: %w", err)
	}
	return &c, nil
}

// MetricValue returns the value of the sample of metric name whose labels
// are exactly labels (Prometheus text format, e.g. `reason="no_node"`),
// 0 when the hub exposes no such sample.
func (h *Hub) MetricValue(ctx context.Context, name, labels string) (float64, error) {
	text, err := h.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	want := name
	if labels != "" {
		want += "{" + labels + "}"
	}
	for _, line := range strings.Split(text, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || series != want {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("framework: hub %s metric %s: %w", h.id, want, err)
		}
		return v, nil
	}
	return 0, nil
}
