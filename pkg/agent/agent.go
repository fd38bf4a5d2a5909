package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/utils/clock"
)

// Errors of the agent; returned errors wrap one of them.
var (
	// ErrInvalidOptions means Options cannot make a working agent.
	ErrInvalidOptions = errors.New("agent: invalid options")
	// ErrToken means Options.TokenFunc failed.
	ErrToken = errors.New("agent: no token")
	// ErrInvalidResponse means the CA answered with a chain the agent
	// refuses: not a certificate for its key, or not chaining to the
	// roots sent with it.
	ErrInvalidResponse = errors.New("agent: invalid CA response")
)

// Options configure an agent. DefaultOptions gives the defaults.
type Options struct {
	// CAAddr is the CA's gRPC address, host:port. Required.
	CAAddr string
	// CARoots verify the CA's TLS certificate. Required: a workload must
	// not send its token to a CA it cannot authenticate. The roots the
	// agent later receives from the CA (trust bundle, CreateCertificate
	// responses) are trusted besides them, so that the CA may move its
	// serving certificate to a new root announced in the bundle.
	CARoots *x509.CertPool
	// ServerName is the name checked in the CA's certificate, and sent as
	// SNI; default the host of CAAddr.
	ServerName string
	// ClusterID is the workload's cluster, sent as "ClusterID" metadata:
	// the CA reviews the token with that cluster's apiserver. Required.
	ClusterID string
	// TokenFunc returns the workload's service account token, asked for
	// before every request (projected tokens rotate). Required; see
	// TokenFile.
	TokenFunc func(context.Context) (string, error)
	// Identity, when set, is the SPIFFE ID put in the CSR. The CA decides
	// the identity from the token and may ignore it; it documents intent.
	Identity string
	// Dir receives cert-chain.pem, key.pem and root-cert.pem. Empty keeps
	// the certificate in memory only (Current).
	Dir string
	// TTL is the lifetime requested; zero lets the CA choose (24h for
	// Istio's and the hub's CA).
	TTL time.Duration
	// RenewAt is the fraction of a certificate's lifetime after which it
	// is renewed. Default 0.5, istio-agent's SECRET_GRACE_PERIOD_RATIO: half
	// the lifetime is left to ride out a CA outage.
	RenewAt float64
	// RetryInitial and RetryMax bound the exponential backoff after a
	// failed request. Default 1s and 1m.
	RetryInitial, RetryMax time.Duration
	// RequestTimeout bounds one CreateCertificate call (not the trust
	// bundle stream, which stays open). Default 30s.
	RequestTimeout time.Duration
	// DialOptions are added to the agent's own (TLS, verified as CARoots
	// says).
	DialOptions []grpc.DialOption
	// Clock drives renewal and retries, and dates the verification of
	// certificates. Default the real clock.
	Clock clock.WithTicker
	Log   logr.Logger
}

// DefaultOptions returns the defaults of Options.
func DefaultOptions() Options {
	return Options{
		RenewAt:        0.5,
		RetryInitial:   time.Second,
		RetryMax:       time.Minute,
		RequestTimeout: 30 * time.Second,
		Clock:          clock.RealClock{},
		Log:            logr.Discard(),
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.RenewAt == 0 {
		o.RenewAt = d.RenewAt
	}
	if o.RetryInitial == 0 {
		o.RetryInitial = d.RetryInitial
	}
	if o.RetryMax == 0 {
		o.RetryMax = d.RetryMax
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = d.RequestTimeout
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Log.GetSink() == nil {
		o.Log = d.Log
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.CAAddr == "":
		return fmt.Errorf("%w: CAAddr is required", ErrInvalidOptions)
	case o.CARoots == nil:
		return fmt.Errorf("%w: CARoots is required", ErrInvalidOptions)
	case o.ClusterID == "":
		return fmt.Errorf("%w: ClusterID is required", ErrInvalidOptions)
	case o.TokenFunc == nil:
		return fmt.Errorf("%w: TokenFunc is required", ErrInvalidOptions)
	case o.RenewAt <= 0 || o.RenewAt >= 1:
		return fmt.Errorf("%w: RenewAt %v is not in (0, 1)", ErrInvalidOptions, o.RenewAt)
	case o.TTL < 0 || o.RetryInitial < 0 || o.RetryMax < o.RetryInitial || o.RequestTimeout < 0:
		return fmt.Errorf("%w: negative durations or RetryMax < RetryInitial", ErrInvalidOptions)
	}
	if o.Identity != "" {
		if _, err := url.Parse(o.Identity); err != nil {
			return fmt.Errorf("%w: Identity: %w", ErrInvalidOptions, err)
		}
	}
	return nil
}

// TokenFile returns a TokenFunc that reads the token from path each time,
// as a projected service account token volume is refreshed in place.
func TokenFile(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// Bundle is one issued certificate with its key and roots. It is immutable.
type Bundle struct {
	// CertChainPEM is the leaf followed by any intermediates.
	CertChainPEM []byte
	// KeyPEM is the leaf's private key, PKCS #8.
	KeyPEM []byte
	// RootsPEM are the roots to trust peers with: those the CA sent with
	// the certificate, or those of a newer trust bundle (see Agent). They
	// are what root-cert.pem holds.
	RootsPEM []byte
	// Leaf is the parsed leaf certificate.
	Leaf *x509.Certificate
}

// TLSCertificate returns the bundle as a certificate for crypto/tls.
func (b *Bundle) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(b.CertChainPEM, b.KeyPEM)
}

// Agent keeps one workload certificate and its roots fresh. Create it with
// New, run it with Run; Current, Ready, Issued and RootsUpdated may be
// called concurrently with Run.
//
// The roots written are the newest the agent received: those of the latest
// CreateCertificate response, or those of a trust bundle that arrived after
// it, whichever came last.
type Agent struct {
	opts       Options
	serverName string // checked in the CA's certificate

	current      atomic.Pointer[Bundle]
	ready        chan struct{}
	readyOnce    sync.Once
	issued       atomic.Int64
	rootsUpdated atomic.Int64

	// trust verifies the CA's TLS certificate: CARoots, csrRoots and
	// bundleRoots. Replaced (under mu) whenever one of them changes; read
	// without the lock by every handshake.
	trust atomic.Pointer[x509.CertPool]

	// mu serializes publishing: writing a generation to Dir and storing
	// current, so that a root-only rewrite never puts the leaf of one
	// generation beside the key of another. It also guards the fields below.
	mu sync.Mutex
	// csrRoots are the roots of the latest CreateCertificate response.
	csrRoots []*x509.Certificate
	// bundleRoots are the roots of the latest accepted trust bundle; nil
	// before one.
	bundleRoots []*x509.Certificate
	// writtenRoots are the roots of current (and of root-cert.pem).
	writtenRoots []*x509.Certificate
}

// New returns an agent. It does no I/O.
func New(opts Options) (*Agent, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, serverName: opts.ServerName, ready: make(chan struct{})}
	if a.serverName == "" {
		a.serverName = hostOf(opts.CAAddr)
	}
	if a.serverName == "" {
		return nil, fmt.Errorf("%w: no ServerName, and none in CAAddr %q", ErrInvalidOptions, opts.CAAddr)
	}
	a.trust.Store(opts.CARoots.Clone())
	return a, nil
}

// Run is New followed by Agent.Run.
func Run(ctx context.Context, opts Options) error {
	a, err := New(opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Current returns the latest certificate with the roots written beside it
// (the newest received), or nil before the first certificate.
func (a *Agent) Current() *Bundle { return a.current.Load() }

// Ready is closed once the first certificate is in place (written to Dir
// when one is set).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Issued counts the certificates obtained so far.
func (a *Agent) Issued() int64 { return a.issued.Load() }

// RootsUpdated counts the rewrites of the roots alone (same certificate and
// key) after a trust bundle brought different roots.
func (a *Agent) RootsUpdated() int64 { return a.rootsUpdated.Load() }

// Run obtains a certificate, writes it, and renews it until ctx ends; then
// it returns nil. Meanwhile it watches the CA's trust bundle
// (meshfed.trust.v1.TrustBundle/Watch) on the same connection and rewrites
// the roots when they change. Failures are logged and retried with backoff;
// only invalid options end it early.
func (a *Agent) Run(ctx context.Context) error {
	tlsCfg := &tls.Config{
		ServerName: a.opts.ServerName,
		MinVersion: tls.VersionTLS12,
		// The roots to verify the CA with change at run time (the trust
		// bundle), but RootCAs is fixed once a connection is configured:
		// crypto/tls's own verification is turned off and verifyCA does
		// the same checks against the roots of the moment instead.
		InsecureSkipVerify: true, // verified by verifyCA, not skipped
		VerifyConnection:   a.verifyCA,
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}, a.opts.DialOptions...)
	conn, err := grpc.NewClient(a.opts.CAAddr, dial...)
	if err != nil {
		return fmt.Errorf("%w: CA address %q: %w", ErrInvalidOptions, a.opts.CAAddr, err)
	}
	defer conn.Close()
	log := a.opts.Log.WithValues("ca", a.opts.CAAddr, "cluster", a.opts.ClusterID)
	var wg sync.WaitGroup
	defer wg.Wait() // before conn.Close
	wg.Go(func() { a.watchRoots(ctx, conn, log) })
	a.renewLoop(ctx, pb.NewIstioCertificateServiceClient(conn), log)
	return nil
}

// renewLoop obtains and renews the certificate until ctx ends.
func (a *Agent) renewLoop(ctx context.Context, client pb.IstioCertificateServiceClient, log logr.Logger) {
	retry := a.opts.RetryInitial
	for {
		var wait time.Duration
		b, err := a.renew(ctx, client)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			wait, retry = retry, min(2*retry, a.opts.RetryMax)
			log.Error(err, "certificate request failed", "retryIn", wait)
		default:
			retry = a.opts.RetryInitial
			wait = a.renewIn(b.Leaf)
			log.V(1).Info("certificate issued", "uris", b.Leaf.URIs, "notAfter", b.Leaf.NotAfter, "renewIn", wait)
		}
		t := a.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// renewIn is how long until leaf, just received, should be renewed:
// RenewAt of the lifetime it has left. The lifetime is counted from now,
// not from NotBefore, because CAs backdate NotBefore for clock skew (the
// hub by five minutes, Istio by one): with a short lifetime, half of
// NotAfter-NotBefore may already have passed on arrival. A certificate
// already due is renewed after RetryInitial, so a CA that issues very
// short lifetimes cannot make the agent spin.
func (a *Agent) renewIn(leaf *x509.Certificate) time.Duration {
	now := a.opts.Clock.Now()
	from := now
	if leaf.NotBefore.After(now) {
		from = leaf.NotBefore
	}
	at := from.Add(time.Duration(float64(leaf.NotAfter.Sub(from)) * a.opts.RenewAt))
	return max(at.Sub(now), a.opts.RetryInitial)
}

// renew obtains a new certificate, checks it and publishes it.
func (a *Agent) renew(ctx context.Context, client pb.IstioCertificateServiceClient) (*Bundle, error) {
	token, err := a.opts.TokenFunc(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if token == "" {
		return nil, fmt.Errorf("%w: empty token", ErrToken)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("agent: key: %w", err)
	}
	tmpl := &x509.CertificateRequest{}
	if a.opts.Identity != "" {
		u, _ := url.Parse(a.opts.Identity) // validated
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("agent: CSR: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	rctx = metadata.AppendToOutgoingContext(rctx, "authorization", "Bearer "+token, "ClusterID", a.opts.ClusterID)
	resp, err := client.CreateCertificate(rctx, &pb.IstioCertificateRequest{
		Csr:              string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
		ValidityDuration: int64(a.opts.TTL / time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("agent: CreateCertificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("agent: key: %w", err)
	}
	b, roots, err := newBundle(resp.GetCertChain(), key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), a.opts.Clock.Now())
	if err != nil {
		return nil, err
	}
	if err := a.publishIssued(b, roots); err != nil {
		return nil, err
	}
	a.issued.Add(1)
	a.readyOnce.Do(func() { close(a.ready) })
	return b, nil
}

// publishIssued writes and stores a new certificate with the roots of its
// response, the newest roots now.
func (a *Agent) publishIssued(b *Bundle, roots []*x509.Certificate) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// The response came over a verified connection: its roots are trusted
	// even if writing fails.
	a.csrRoots = roots
	a.refreshTrustLocked()
	if err := a.writeLocked(b); err != nil {
		return err
	}
	a.current.Store(b)
	a.writtenRoots = roots
	return nil
}

// writeLocked writes b to Dir, when one is set, as one generation.
func (a *Agent) writeLocked(b *Bundle) error {
	if a.opts.Dir == "" {
		return nil
	}
	return writeGeneration(a.opts.Dir, []file{
		{RootCertFile, b.RootsPEM, 0o644},
		{KeyFile, b.KeyPEM, 0o600},
		{CertChainFile, b.CertChainPEM, 0o644},
	})
}

// newBundle checks a CreateCertificate chain, [leaf, intermediates...,
// roots], against the key it was asked for and at now. It returns the
// roots parsed too.
func newBundle(chain []string, key *ecdsa.PrivateKey, keyPEM []byte, now time.Time) (*Bundle, []*x509.Certificate, error) {
	if len(chain) < 2 {
		return nil, nil, fmt.Errorf("%w: chain of %d elements, want the leaf and the roots at least", ErrInvalidResponse, len(chain))
	}
	var certs []*x509.Certificate
	var chainPEM []byte
	for _, s := range chain[:len(chain)-1] {
		cs, err := parseCerts([]byte(s))
		if err != nil {
			return nil, nil, err
		}
		certs = append(certs, cs...)
		for _, c := range cs {
			chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	roots, err := parseCerts([]byte(chain[len(chain)-1]))
	if err != nil {
		return nil, nil, err
	}
	leaf := certs[0]
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, nil, fmt.Errorf("%w: the leaf is not for the requested key", ErrInvalidResponse)
	}
	rootPool, mid := x509.NewCertPool(), x509.NewCertPool()
	var rootsPEM bytes.Buffer
	for _, r := range roots {
		rootPool.AddCert(r)
		rootsPEM.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw}))
	}
	for _, c := range certs[1:] {
		mid.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: rootPool, Intermediates: mid, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidResponse, err)
	}
	return &Bundle{CertChainPEM: chainPEM, KeyPEM: keyPEM, RootsPEM: rootsPEM.Bytes(), Leaf: leaf}, roots, nil
}

// parseCerts reads the PEM certificates of data, at least one.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: PEM block %q in the chain", ErrInvalidResponse, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidResponse, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: chain element without a certificate", ErrInvalidResponse)
	}
	return out, nil
}
