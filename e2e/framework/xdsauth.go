package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// TrustBundle waits until the hub's /debug/trustz lists a root (until ctx
// ends) and returns the roots as PEM and as a pool: what a Pod mounts as
// istio-ca-root-cert, and what verifies the hub's CA port.
func (h *Hub) TrustBundle(ctx context.Context) ([]byte, *x509.CertPool, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		tz, err := h.Trustz(ctx)
		if err == nil && len(tz.Roots) == 0 {
			err = errors.New("no root yet")
		}
		if err == nil {
			var pemBytes []byte
			pool := x509.NewCertPool()
			for _, r := range tz.Roots {
				if !pool.AppendCertsFromPEM([]byte(r.PEM)) {
					return nil, nil, fmt.Errorf("framework: hub %s root %s does not parse", h.id, r.Fingerprint)
				}
				pemBytes = append(pemBytes, r.PEM...)
			}
			return pemBytes, pool, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("framework: hub %s trust bundle: %w (last: %w)", h.id, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// TransportCredentials are TLS credentials for the hub's authenticated
// port (Hub.CAAddr) as a workload of the agent's identity dials it: the
// agent's current certificate presented on every handshake, the hub
// verified against the agent's roots of the moment for the dialed host
// (the framework certifies it with --xds-san).
func (a *CertAgent) TransportCredentials() (credentials.TransportCredentials, error) {
	pemBytes, err := os.ReadFile(filepath.Join(a.dir, agent.RootCertFile))
	if err != nil {
		return nil, fmt.Errorf("framework: agent roots: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		return nil, errors.New("framework: agent roots do not parse")
	}
	return credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return a.Certificate()
		},
	}), nil
}

// operator is how a person with a token of the config cluster reads the
// hub's authenticated port.
type operator struct {
	token   string
	roots   *x509.CertPool
	ctlArgs []string
}

// CtlArgs are meshfedctl's flags to read the hub's authenticated port
// (proxy-status) as an operator of the config cluster does: --hub CAAddr,
// a token of istio-system/default (audience CertAudience, which the hub
// reviews with the config cluster, as istioctl's) and the hub's roots, in
// files under the fleet's directory. They are made once per hub.
func (h *Hub) CtlArgs(ctx context.Context) ([]string, error) {
	op, err := h.operator(ctx)
	if err != nil {
		return nil, err
	}
	return op.ctlArgs, nil
}

// OperatorConn dials the hub's authenticated port (CSDS, ADS) as CtlArgs
// do: the hub verified against its roots, the operator's token sent with
// every call.
func (h *Hub) OperatorConn(ctx context.Context) (*grpc.ClientConn, error) {
	op, err := h.operator(ctx)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(h.CAAddr(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: op.roots, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearerToken(op.token)))
	if err != nil {
		return nil, fmt.Errorf("framework: dialing hub %s CA port: %w", h.id, err)
	}
	return cc, nil
}

// bearerToken sends a token as istioctl and pilot-agent do.
type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }

// operator makes the credentials once; a failure (ctx ended, say) is
// tried again by the next caller.
func (h *Hub) operator(ctx context.Context) (*operator, error) {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	if h.op == nil {
		op, err := h.newOperator(ctx)
		if err != nil {
			return nil, err
		}
		h.op = op
	}
	return h.op, nil
}

func (h *Hub) newOperator(ctx context.Context) (*operator, error) {
	cfg := h.fleet.Config()
	if err := cfg.EnsureServiceAccount(ctx, RemoteSecretNamespace, "default"); err != nil {
		return nil, err
	}
	token, err := cfg.ServiceAccountToken(ctx, RemoteSecretNamespace, "default", CertAudience)
	if err != nil {
		return nil, err
	}
	rootsPEM, roots, err := h.TrustBundle(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(h.fleet.dir, "hubs", h.id+"-operator")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tokenFile, rootsFile := filepath.Join(dir, "token"), filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(rootsFile, rootsPEM, 0o600); err != nil {
		return nil, err
	}
	return &operator{token: token, roots: roots,
		ctlArgs: []string{"--hub", h.CAAddr(), "--token-file", tokenFile, "--ca-file", rootsFile}}, nil
}
