package trust

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/trustsvc"
	"github.com/meshfed/meshfed/pkg/pki"
)

// Bundle is the federated trust bundle as the CA uses it;
// *replication.Trust implements it. Its methods may be called
// concurrently and do not block.
type Bundle interface {
	TrustRoots() []federation.Root
	TrustChanged() <-chan struct{}
	AddRoot(federation.Root) bool
	RetireRoot(fingerprint string, at time.Time) bool
}

// Options configure a CA.
type Options struct {
	// Client reads and writes the config cluster (CA Secret, retiring
	// roots). Required.
	Client client.WithWatch
	// Namespace of the CA Secret and of the retiring roots' ConfigMap.
	Namespace string
	// Replica adds the CA's roots to the bundle under its name.
	Replica federation.ReplicaID
	// TrustDomain of workload SPIFFE IDs.
	TrustDomain pki.TrustDomain
	// Audiences are the token audiences the CA accepts (any one).
	Audiences []string
	// Clusters gives the credentials that review each remote cluster's
	// tokens. Required.
	Clusters ca.ClusterConfigs
	// Bundle is the federated trust bundle. Required.
	Bundle Bundle
	// CertTTL is the lifetime of a certificate whose request names none;
	// MaxCertTTL caps what a request may ask for.
	CertTTL, MaxCertTTL time.Duration
	// DNSNames name the CA's serving certificate; empty means istiod.<ns>.svc
	// and meshfed-hub.<ns>.svc (istio-agent's default CA address, and the
	// hub's own Service). IPs are added to it (loopback always is).
	DNSNames []string
	IPs      []net.IP
	// Authenticator reviews the callers' tokens; nil means one of the CA's
	// own over Clusters. The hub passes the one its xDS streams share, so
	// both use one review cache.
	Authenticator ca.TokenAuthenticator
	// GRPCOptions are the CA server's (ca.ServerOptions). More services
	// join the CA's TLS port through Register.
	GRPCOptions []grpc.ServerOption
	// RetireGrace and RootSpread are the key store's (ca.KeyStoreOptions).
	RetireGrace, RootSpread time.Duration

	Clock   clock.WithTicker
	Metrics prometheus.Registerer
	// Log is the hub's logger: the CA logs under "ca", the trust-bundle
	// service under "trustsvc".
	Log logr.Logger
}

// CA is the hub's workload certificate authority (hub/ca) with the
// trust-bundle service (hub/trustsvc) on its port, and the glue between
// its keys and the federated trust bundle: the CA's roots join the bundle,
// rotated ones retire from it, and roots retiring when the fleet last ran
// are restored from the config cluster.
type CA struct {
	opts   Options
	server *ca.Server
	keys   *ca.KeyStore
	trust  *trustsvc.Service // the trust-bundle stream of spoke shims and workload agents
	// retiring keeps the retiring roots in the config cluster, for a
	// fleet that restarts as a whole in the middle of a rotation.
	retiring ca.Retirements
	log      logr.Logger
}

// New loads (or creates once, in the config cluster) the signing keys and
// builds the certificate service. Tokens are reviewed against the remote
// cluster each caller names, through opts.Clusters. Key rotations in the
// config cluster reach the trust bundle through rotated.
func New(ctx context.Context, opts Options) (*CA, error) {
	if opts.Client == nil || opts.Clusters == nil || opts.Bundle == nil {
		return nil, errors.New("trust: Client, Clusters and Bundle are required")
	}
	c := &CA{opts: opts, log: opts.Log.WithName("ca"),
		retiring: ca.Retirements{Client: opts.Client, Namespace: opts.Namespace}}
	keys, err := ca.NewKeyStore(ctx, ca.KeyStoreOptions{
		Client: opts.Client, Namespace: opts.Namespace, Keys: ca.KeyOptions{TrustDomain: opts.TrustDomain},
		MaxLeafTTL: opts.MaxCertTTL, RetireGrace: opts.RetireGrace, RootSpread: opts.RootSpread,
		OnRotate: c.rotated, Clock: opts.Clock, Metrics: opts.Metrics, Log: c.log,
	})
	if err != nil {
		return nil, fmt.Errorf("trust: CA keys: %w", err)
	}
	authn := opts.Authenticator
	if authn == nil {
		if authn, err = ca.NewAuthenticator(ca.AuthenticatorOptions{
			Clusters: opts.Clusters, Audiences: opts.Audiences, Clock: opts.Clock, Metrics: opts.Metrics,
		}); err != nil {
			return nil, fmt.Errorf("trust: CA authenticator: %w", err)
		}
	}
	svc, err := trustsvc.New(trustsvc.Options{
		Authenticator: authn, Roots: opts.Bundle.TrustRoots, Changed: opts.Bundle.TrustChanged(),
		Log: opts.Log.WithName("trustsvc"), Metrics: opts.Metrics, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("trust: trust bundle service: %w", err)
	}
	names := opts.DNSNames
	if len(names) == 0 {
		names = DefaultDNSNames(opts.Namespace)
	}
	srv, err := ca.NewServer(ca.ServerOptions{
		Keys: keys, Authenticator: authn, TrustDomain: opts.TrustDomain,
		TrustBundle: func() []byte { return trustsvc.BundleOf(opts.Bundle.TrustRoots()).PEM() },
		DefaultTTL:  opts.CertTTL, MaxTTL: opts.MaxCertTTL,
		ServingDNSNames: names, ServingIPs: opts.IPs, Clock: opts.Clock, Metrics: opts.Metrics, Log: c.log,
		Services:    []func(grpc.ServiceRegistrar){svc.Register},
		GRPCOptions: opts.GRPCOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("trust: CA: %w", err)
	}
	c.server, c.keys, c.trust = srv, keys, svc
	c.log.Info("workload CA ready", "keys", keys.Current().Source(), "trustDomain", opts.TrustDomain)
	return c, nil
}

// DefaultDNSNames are the CA's serving names in namespace ns when none are
// configured: istiod.<ns>.svc, istio-agent's default CA address, and
// meshfed-hub.<ns>.svc, the hub's own Service.
func DefaultDNSNames(ns string) []string {
	return []string{"istiod." + ns + ".svc", "meshfed-hub." + ns + ".svc"}
}

// Register adds services to the CA's TLS port (the authenticated port,
// Istio's 15012), beside the certificate API and the trust-bundle
// service: the hub's authenticated xDS registers there. Call it before Run.
func (c *CA) Register(services ...func(grpc.ServiceRegistrar)) { c.server.Register(services...) }

// Spokes returns the trust-bundle service, whose streams are the spokes'
// (fleetstatus.Spokes).
func (c *CA) Spokes() *trustsvc.Service { return c.trust }

// TLSConfig is the server side of the CA port's TLS (ca.Server.TLSConfig):
// its certificate, and a client certificate asked for, not verified.
func (c *CA) TLSConfig() *tls.Config { return c.server.TLSConfig() }

// Run adds the CA's roots to the trust bundle, puts back the roots still
// retiring from before this start, then serves the CA and the trust-bundle
// service on addr and follows key rotations until ctx ends.
func (c *CA) Run(ctx context.Context, addr string) error {
	if err := c.publishRoots(c.keys.Current(), nil); err != nil {
		return err
	}
	c.restoreRetiring(ctx)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.keys.Run(ctx) })
	g.Go(func() error { return c.trust.Run(ctx) })
	g.Go(func() error { return c.server.Serve(ctx, addr) })
	return g.Wait()
}

// publishRoots adds the roots of keys to the federated trust bundle, so
// every replica (and every hub of another config cluster in the
// federation) trusts them: all of them when only is nil, else those whose
// fingerprints only lists.
func (c *CA) publishRoots(keys *ca.Keys, only []string) error {
	roots, err := federation.ParseRootPEM(keys.RootsPEM(), c.opts.TrustDomain, c.opts.Replica, c.opts.Clock.Now())
	if err != nil {
		return fmt.Errorf("trust: CA roots: %w", err)
	}
	for _, r := range roots {
		if only == nil || slices.Contains(only, r.Fingerprint) {
			c.opts.Bundle.AddRoot(r)
		}
	}
	return nil
}

// rotated brings the trust bundle in line with rotated CA keys: new roots
// join at once, dropped ones retire when their last leaves expire. ctx is
// the key store's (KeyStore.Run's); the config-cluster write outlives its
// end by up to 30 s.
func (c *CA) rotated(ctx context.Context, rot ca.Rotation) {
	if len(rot.Added) > 0 {
		if err := c.publishRoots(rot.New, rot.Added); err != nil {
			c.log.Error(err, "new CA roots not added to the trust bundle")
		}
	}
	if len(rot.Retired) == 0 {
		return
	}
	// The config cluster records the retirements before the bundle shows
	// them: once any replica reports a root as retiring, a restart of the
	// whole fleet keeps it. A stop during the write lets the write end.
	keep := make([]ca.RetiringRoot, 0, len(rot.Retired))
	for _, r := range rot.Retired {
		keep = append(keep, ca.RetiringRoot{Fingerprint: r.Fingerprint, PEM: r.PEM, RetireAt: r.At})
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.retiring.Save(wctx, keep, c.opts.Clock.Now()); err != nil {
		// The replicas still hold the retirement; only a restart of
		// every replica before it is due would lose it.
		c.log.Error(err, "retiring roots not recorded in the config cluster")
	}
	for _, r := range rot.Retired {
		if c.opts.Bundle.RetireRoot(r.Fingerprint, r.At) {
			c.log.Info("CA root retiring", "root", r.Fingerprint, "at", r.At.UTC())
		}
	}
}

// restoreRetiring puts back into the trust bundle the roots that were
// retiring when the fleet last ran (RetiringConfigMap) and are still due
// to be trusted, unless the CA Secret configures them again.
func (c *CA) restoreRetiring(ctx context.Context) {
	now := c.opts.Clock.Now()
	roots, err := c.retiring.Load(ctx, now)
	if err != nil {
		c.log.Error(err, "some retiring roots could not be read")
	}
	configured := c.keys.Current().RootFingerprints()
	for _, r := range roots {
		if slices.Contains(configured, r.Fingerprint) {
			continue
		}
		parsed, err := federation.ParseRootPEM(r.PEM, c.opts.TrustDomain, c.opts.Replica, now)
		if err != nil || len(parsed) != 1 || parsed[0].Fingerprint != r.Fingerprint {
			c.log.Error(err, "a retiring root recorded in the config cluster is not the certificate it names", "root", r.Fingerprint)
			continue
		}
		parsed[0].RetireAt = r.RetireAt.UTC()
		if c.opts.Bundle.AddRoot(parsed[0]) {
			c.log.Info("CA root still retiring (recorded before this start)", "root", r.Fingerprint, "at", r.RetireAt.UTC())
		}
	}
}
