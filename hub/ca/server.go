package ca

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
)

// Request metadata, as istio-agent sends it (gRPC lower-cases keys).
const (
	// MetadataAuthorization carries "Bearer <token>".
	MetadataAuthorization = "authorization"
	// MetadataClusterID names the caller's cluster ("ClusterID" on the
	// wire, lower-cased by gRPC).
	MetadataClusterID = "clusterid"
)

// ServerOptions configure a Server. DefaultServerOptions gives the defaults
// of everything but Keys and Authenticator.
type ServerOptions struct {
	// Keys sign the certificates: fixed *Keys, or a *KeyStore that follows
	// the CA Secrets (each request and each serving certificate uses the
	// keys current at that time). Required.
	Keys KeySource
	// TrustBundle, when set, returns the roots workloads should trust, PEM:
	// the federated trust bundle, every trust domain's roots. A response
	// carries them with the CA's own roots (kept even when the bundle has
	// not caught up with them yet), so a workload trusts peers of other
	// config clusters and roots on their way in or out of a rotation.
	TrustBundle func() []byte
	// Authenticator proves the caller's identity. Required.
	Authenticator TokenAuthenticator
	// TrustDomain of the SPIFFE IDs issued. Default cluster.local.
	TrustDomain pki.TrustDomain
	// DefaultTTL is the lifetime of a certificate whose request names
	// none. Default 24h, Istio's DEFAULT_WORKLOAD_CERT_TTL.
	DefaultTTL time.Duration
	// MaxTTL caps the lifetime a request may ask for; longer requests are
	// cut to it (Istio refuses them instead; cutting lets an agent
	// configured for longer still work). Default 24h: a stolen key is
	// good for a day at most, and agents renew at half-life anyway.
	MaxTTL time.Duration
	// ServingDNSNames and ServingIPs are the names of the CA's own TLS
	// certificate, issued from Keys: the hub's service names, so that
	// workloads verify it with the roots they trust for everything else.
	// "localhost", 127.0.0.1 and ::1 are always included.
	ServingDNSNames []string
	ServingIPs      []net.IP
	// ServingCertTTL is the lifetime of that certificate; it is re-issued
	// at half-life. Default 24h.
	ServingCertTTL time.Duration
	// ShutdownGrace bounds how long Serve lets in-flight requests finish
	// once its context ends. Default 5s.
	ShutdownGrace time.Duration
	// Services are registered on the CA's gRPC server next to the
	// certificate API, sharing its TLS port (the trust-bundle service of
	// hub/trustsvc, and the authenticated xDS of hub/xds, for two).
	Services []func(grpc.ServiceRegistrar)
	// GRPCOptions are added to the CA's gRPC server options after its own,
	// so they win: the keepalive policy and message size that long-lived
	// xDS streams on this port need (hub/xds.Server.GRPCOptions).
	GRPCOptions []grpc.ServerOption
	// Clock tells the time for certificates. Default the real clock.
	Clock clock.Clock
	// Metrics registers meshfed_ca_csr_total and
	// meshfed_ca_sign_duration_seconds; nil skips registration.
	Metrics prometheus.Registerer
	Log     logr.Logger
}

// DefaultServerOptions returns the defaults of ServerOptions.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{
		TrustDomain:    DefaultTrustDomain,
		DefaultTTL:     24 * time.Hour,
		MaxTTL:         24 * time.Hour,
		ServingCertTTL: 24 * time.Hour,
		ShutdownGrace:  5 * time.Second,
		Clock:          clock.RealClock{},
		Log:            logr.Discard(),
	}
}

func (o ServerOptions) withDefaults() ServerOptions {
	d := DefaultServerOptions()
	if o.TrustDomain == "" {
		o.TrustDomain = d.TrustDomain
	}
	if o.DefaultTTL == 0 {
		o.DefaultTTL = d.DefaultTTL
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = d.MaxTTL
	}
	if o.ServingCertTTL == 0 {
		o.ServingCertTTL = d.ServingCertTTL
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = d.ShutdownGrace
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Log.GetSink() == nil {
		o.Log = d.Log
	}
	return o
}

// CSR results, the values of meshfed_ca_csr_total's label "result".
const (
	resultSigned          = "signed"
	resultUnauthenticated = "unauthenticated"
	resultInvalid         = "invalid"
	resultError           = "error"
)

// Server is the hub's IstioCertificateService. Safe for concurrent use.
type Server struct {
	pb.UnimplementedIstioCertificateServiceServer

	opts    ServerOptions
	csrs    *prometheus.CounterVec
	signDur prometheus.Histogram
	serving *servingCert
}

// NewServer returns a Server. It does no I/O.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Keys == nil || opts.Keys.Current() == nil || opts.Authenticator == nil {
		return nil, errors.New("ca: ServerOptions.Keys and Authenticator are required")
	}
	opts = opts.withDefaults()
	if err := opts.TrustDomain.Validate(); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if opts.DefaultTTL < 0 || opts.MaxTTL < 0 || opts.DefaultTTL > opts.MaxTTL {
		return nil, fmt.Errorf("ca: TTLs: default %v must be positive and at most the maximum %v", opts.DefaultTTL, opts.MaxTTL)
	}
	s := &Server{
		opts: opts,
		csrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_ca_csr_total",
			Help: "Certificate requests by result: signed, unauthenticated, invalid (a bad CSR), error (the hub's fault).",
		}, []string{"result"}),
		signDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshfed_ca_sign_duration_seconds",
			Help: "Time to parse a CSR and sign its certificate, authentication excluded.",
			// ECDSA P-256 signs in ~0.2 ms; the buckets reach 0.4 s for
			// RSA keys on a loaded machine.
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14),
		}),
	}
	for _, r := range []string{resultSigned, resultUnauthenticated, resultInvalid, resultError} {
		s.csrs.WithLabelValues(r)
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{s.csrs, s.signDur} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("ca: metrics: %w", err)
			}
		}
	}
	s.serving = &servingCert{source: opts.Keys, clock: opts.Clock, ttl: opts.ServingCertTTL,
		dns: append([]string{"localhost"}, opts.ServingDNSNames...),
		ips: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, opts.ServingIPs...)}
	return s, nil
}

// CreateCertificate signs the request's CSR for the caller's identity,
// established from the bearer token and ClusterID in the request metadata.
// The certificate's only SAN is the caller's SPIFFE ID; the CSR's own
// subject and SANs are ignored, as Istio's CA ignores them, so a CSR asking
// for another identity gets the caller's. The response is Istio's chain:
// the leaf first, then the intermediates one by one, the roots last.
func (s *Server) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	chain, id, err := s.create(ctx, req)
	result := resultSigned
	switch {
	case err == nil:
	case IsUnauthenticated(err):
		result = resultUnauthenticated
	case errors.Is(err, pki.ErrInvalidCSR), errors.Is(err, pki.ErrUnsupportedKey):
		result = resultInvalid
	default:
		result = resultError
	}
	s.csrs.WithLabelValues(result).Inc()
	if err != nil {
		if result == resultError {
			s.opts.Log.Error(err, "certificate request failed")
		} else {
			s.opts.Log.V(1).Info("certificate request refused", "result", result, "error", err.Error())
		}
		return nil, grpcError(result, err)
	}
	s.opts.Log.V(2).Info("certificate signed", "identity", id.String())
	return &pb.IstioCertificateResponse{CertChain: chain}, nil
}

func (s *Server) create(ctx context.Context, req *pb.IstioCertificateRequest) ([]string, Identity, error) {
	cluster, token, err := credentialsFrom(ctx)
	if err != nil {
		return nil, Identity{}, err
	}
	id, err := s.opts.Authenticator.Authenticate(ctx, cluster, token)
	if err != nil {
		return nil, Identity{}, err
	}
	start := s.opts.Clock.Now()
	csr, err := pki.ParseCSR([]byte(req.GetCsr()))
	if err != nil {
		return nil, id, err
	}
	keys := s.opts.Keys.Current()
	leaf, err := keys.CA().SignCSR(csr, pki.IssueOptions{
		URIs:     []*url.URL{id.SPIFFEID(s.opts.TrustDomain)},
		Validity: s.ttl(req.GetValidityDuration()),
		Server:   true,
		Client:   true,
		Now:      start,
	})
	if err != nil {
		return nil, id, fmt.Errorf("ca: signing for %s: %w", id, err)
	}
	s.signDur.Observe(s.opts.Clock.Since(start).Seconds())
	chain := make([]string, 0, len(keys.Chain())+2)
	chain = append(chain, string(leaf))
	chain = append(chain, keys.Chain()...)
	roots := keys.RootsPEM()
	if s.opts.TrustBundle != nil {
		roots = unionPEM(roots, s.opts.TrustBundle())
	}
	chain = append(chain, string(roots))
	return chain, id, nil
}

// unionPEM returns the PEM blocks of a followed by those of b that a does
// not hold; text outside blocks is dropped.
func unionPEM(a, b []byte) []byte {
	var out []byte
	var seen [][]byte
	for _, in := range [][]byte{a, b} {
		for {
			var block *pem.Block
			block, in = pem.Decode(in)
			if block == nil {
				break
			}
			if slices.ContainsFunc(seen, func(d []byte) bool { return bytes.Equal(d, block.Bytes) }) {
				continue
			}
			seen = append(seen, block.Bytes)
			out = append(out, pem.EncodeToMemory(block)...)
		}
	}
	return out
}

// ttl is the requested lifetime in seconds, the default when none, cut to
// the maximum.
func (s *Server) ttl(seconds int64) time.Duration {
	switch {
	case seconds <= 0:
		return s.opts.DefaultTTL
	case seconds >= int64(s.opts.MaxTTL/time.Second):
		return s.opts.MaxTTL
	default:
		return time.Duration(seconds) * time.Second
	}
}

// credentialsFrom reads the caller's cluster and bearer token from the
// request metadata.
func credentialsFrom(ctx context.Context) (model.ClusterID, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cluster := ClusterIDOf(md)
	if cluster == "" {
		return "", "", fmt.Errorf("%w: no %q metadata", ErrMissingCredentials, "ClusterID")
	}
	token, err := BearerTokenOf(md)
	if err != nil {
		return "", "", err
	}
	return cluster, token, nil
}

// ClusterIDOf returns the caller's cluster from request metadata md (the
// ClusterID key istio-agent sends), "" without one.
func ClusterIDOf(md metadata.MD) model.ClusterID {
	if v := md.Get(MetadataClusterID); len(v) > 0 {
		return model.ClusterID(strings.TrimSpace(v[0]))
	}
	return ""
}

// BearerTokenOf returns the token of md's "authorization: Bearer <token>".
// Without one it fails with ErrMissingCredentials.
func BearerTokenOf(md metadata.MD) (string, error) {
	auth := md.Get(MetadataAuthorization)
	if len(auth) == 0 {
		return "", fmt.Errorf("%w: no %q metadata", ErrMissingCredentials, MetadataAuthorization)
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(auth[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%w: authorization is not %q", ErrMissingCredentials, "Bearer <token>")
	}
	return strings.TrimSpace(token), nil
}

// grpcError turns an error of the package into a status at the wire.
func grpcError(result string, err error) error {
	switch result {
	case resultUnauthenticated:
		return status.Error(codes.Unauthenticated, err.Error())
	case resultInvalid:
		return status.Error(codes.InvalidArgument, err.Error())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrTokenReview):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, "ca: internal error signing the certificate")
}

// Serve listens on addr (TLS, with a certificate issued from the Keys) and
// serves the certificate API until ctx ends, then stops gracefully.
func (s *Server) Serve(ctx context.Context, addr string) error {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ca: listen %s: %w", addr, err)
	}
	return s.ServeListener(ctx, lis)
}

// Register adds services to the server's gRPC server, as Services does;
// call it before Serve.
func (s *Server) Register(services ...func(grpc.ServiceRegistrar)) {
	s.opts.Services = append(s.opts.Services, services...)
}

// ServeListener is Serve on a listener the caller opened; it closes lis.
func (s *Server) ServeListener(ctx context.Context, lis net.Listener) error {
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(s.TLSConfig())),
		// A request is a CSR (under 64 KiB, see pki.ParseCSR) and metadata.
		grpc.MaxRecvMsgSize(256 << 10),
	}, s.opts.GRPCOptions...)...)
	pb.RegisterIstioCertificateServiceServer(srv, s)
	for _, register := range s.opts.Services {
		register(srv)
	}
	s.opts.Log.Info("serving the certificate API", "addr", lis.Addr().String(), "keys", s.opts.Keys.Current().Source())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("ca: serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-s.opts.Clock.After(s.opts.ShutdownGrace):
		srv.Stop()
		<-stopped
	}
	<-errc
	return nil
}

// TLSConfig is the server side of the CA's TLS: its certificate is issued
// from the Keys for the serving names and re-issued at half-life.
//
// A client certificate is asked for but not verified here: xDS streams on
// this port may authenticate with one, and hub/xds verifies it against the
// mesh roots of the moment, so that a bad certificate is refused with its
// cause (not a bare handshake failure) and a CreateCertificate caller
// presenting a certificate of a retired root still reaches the CA, which
// authenticates by token alone.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.serving.get, ClientAuth: tls.RequestClientCert}
}
