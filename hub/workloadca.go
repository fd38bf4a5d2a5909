package hub

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/trustsvc"
)

// workloadCA is the hub's certificate authority and the roots it adds to
// the federated trust bundle.
type workloadCA struct {
	server *ca.Server
	keys   *ca.KeyStore
	trust  *trustsvc.Service // the trust-bundle stream of spoke shims and workload agents
	bundle trustRoots
	// retiring keeps the retiring roots in the config cluster, for a
	// fleet that restarts as a whole in the middle of a rotation.
	retiring ca.Retirements
	opts     Options
	log      logr.Logger
}

// trustRoots is the federated trust bundle as the CA uses it;
// *replication.Replicator implements it.
type trustRoots interface {
	TrustRoots() []federation.Root
	TrustChanged() <-chan struct{}
	AddRoot(federation.Root) bool
	RetireRoot(fingerprint string, at time.Time) bool
}

// newCA loads (or creates once, in the config cluster) the signing keys and
// builds the certificate service; it returns nil when opts.CAAddr is empty.
// Tokens are reviewed against the remote cluster each caller names, through
// the remote secrets' credentials. Key rotations in the config cluster
// reach the trust bundle through rotated.
func newCA(ctx context.Context, opts Options, c client.WithWatch, clusters ca.ClusterConfigs, bundle trustRoots, log logr.Logger, reg prometheus.Registerer) (*workloadCA, error) {
	if opts.CAAddr == "" {
		return nil, nil
	}
	w := &workloadCA{bundle: bundle, opts: opts, log: log.WithName("ca"),
		retiring: ca.Retirements{Client: c, Namespace: opts.Namespace}}
	keys, err := ca.NewKeyStore(ctx, ca.KeyStoreOptions{
		Client: c, Namespace: opts.Namespace, Keys: ca.KeyOptions{TrustDomain: opts.TrustDomain},
		MaxLeafTTL: opts.MaxWorkloadCertTTL, RetireGrace: opts.RootRetireGrace, RootSpread: opts.RootSpread,
		OnRotate: w.rotated, Clock: opts.Clock, Metrics: reg, Log: w.log,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: CA keys: %w", err)
	}
	authn, err := ca.NewAuthenticator(ca.AuthenticatorOptions{
		Clusters: clusters, Audiences: opts.CAAudiences, Clock: opts.Clock, Metrics: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: CA authenticator: %w", err)
	}
	trust, err := trustsvc.New(trustsvc.Options{
		Authenticator: authn, Roots: bundle.TrustRoots, Changed: bundle.TrustChanged(),
		Log: log.WithName("trustsvc"), Metrics: reg, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: trust bundle service: %w", err)
	}
	names := opts.CADNSNames
	if len(names) == 0 {
		// istio-agent's default CA address, and the hub's own Service.
		names = []string{"istiod." + opts.Namespace + ".svc", "meshfed-hub." + opts.Namespace + ".svc"}
	}
	srv, err := ca.NewServer(ca.ServerOptions{
		Keys: keys, Authenticator: authn, TrustDomain: opts.TrustDomain,
		TrustBundle: func() []byte { return trustsvc.BundleOf(bundle.TrustRoots()).PEM() },
		DefaultTTL:  opts.WorkloadCertTTL, MaxTTL: opts.MaxWorkloadCertTTL,
		ServingDNSNames: names, Clock: opts.Clock, Metrics: reg, Log: w.log,
		Services: []func(grpc.ServiceRegistrar){trust.Register},
	})
	if err != nil {
		return nil, fmt.Errorf("hub: CA: %w", err)
	}
	w.server, w.keys, w.trust = srv, keys, trust
	log.Info("workload CA ready", "keys", keys.Current().Source(), "trustDomain", opts.TrustDomain)
	return w, nil
}

// publishRoots adds the roots of keys to the federated trust bundle, so
// every replica (and every hub of another config cluster in the
// federation) trusts them: all of them when only is nil, else those whose
// fingerprints only lists.
func (w *workloadCA) publishRoots(keys *ca.Keys, only []string) error {
	roots, err := federation.ParseRootPEM(keys.RootsPEM(), w.opts.TrustDomain.String(), federation.ReplicaID(w.opts.ReplicaID), w.opts.Clock.Now())
	if err != nil {
		return fmt.Errorf("hub: CA roots: %w", err)
	}
	for _, r := range roots {
		if only == nil || slices.Contains(only, r.Fingerprint) {
			w.bundle.AddRoot(r)
		}
	}
	return nil
}

// rotated brings the trust bundle in line with rotated CA keys: new roots
// join at once, dropped ones retire when their last leaves expire. ctx is
// the key store's (KeyStore.Run's): the config-cluster write ends with it.
func (w *workloadCA) rotated(ctx context.Context, rot ca.Rotation) {
	if len(rot.Added) > 0 {
		if err := w.publishRoots(rot.New, rot.Added); err != nil {
			w.log.Error(err, "new CA roots not added to the trust bundle")
		}
	}
	var keep []ca.RetiringRoot
	for _, r := range rot.Retired {
		if w.bundle.RetireRoot(r.Fingerprint, r.At) {
			w.log.Info("CA root retiring", "root", r.Fingerprint, "at", r.At.UTC())
		}
		keep = append(keep, ca.RetiringRoot{Fingerprint: r.Fingerprint, PEM: r.PEM, RetireAt: r.At})
	}
	if len(keep) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.retiring.Save(ctx, keep, w.opts.Clock.Now()); err != nil {
			// The replicas still hold the retirement; only a restart of
			// every replica before it is due would lose it.
			w.log.Error(err, "retiring roots not recorded in the config cluster")
		}
	}
}

// restoreRetiring puts back into the trust bundle the roots that were
// retiring when the fleet last ran (RetiringConfigMap) and are still due
// to be trusted, unless the CA Secret configures them again.
func (w *workloadCA) restoreRetiring(ctx context.Context) {
	now := w.opts.Clock.Now()
	roots, err := w.retiring.Load(ctx, now)
	if err != nil {
		w.log.Error(err, "some retiring roots could not be read")
	}
	configured := w.keys.Current().RootFingerprints()
	for _, r := range roots {
		if slices.Contains(configured, r.Fingerprint) {
			continue
		}
		parsed, err := federation.ParseRootPEM(r.PEM, w.opts.TrustDomain.String(), federation.ReplicaID(w.opts.ReplicaID), now)
		if err != nil || len(parsed) != 1 || parsed[0].Fingerprint != r.Fingerprint {
			w.log.Error(err, "a retiring root recorded in the config cluster is not the certificate it names", "root", r.Fingerprint)
			continue
		}
		parsed[0].RetireAt = r.RetireAt.UTC()
		if w.bundle.AddRoot(parsed[0]) {
			w.log.Info("CA root still retiring (recorded before this start)", "root", r.Fingerprint, "at", r.RetireAt.UTC())
		}
	}
}

// Trustz is the JSON document of /debug/trustz: the federated trust bundle.
type Trustz struct {
	Roots []TrustzRoot `json:"roots"`
}

// TrustzRoot is one root of the bundle.
type TrustzRoot struct {
	TrustDomain string `json:"trustDomain"`
	Fingerprint string `json:"fingerprint"`
	Source      string `json:"source"`
	NotAfter    string `json:"notAfter"`
	// RetireAt is when the root leaves the bundle after a rotation.
	RetireAt string `json:"retireAt,omitempty"`
	PEM      string `json:"pem"`
}

func trustz(roots []federation.Root) Trustz {
	out := Trustz{Roots: []TrustzRoot{}}
	for _, r := range roots {
		tr := TrustzRoot{
			TrustDomain: r.TrustDomain, Fingerprint: r.Fingerprint, Source: string(r.Source),
			NotAfter: r.NotAfter.UTC().Format(time.RFC3339), PEM: string(r.PEM),
		}
		if !r.RetireAt.IsZero() {
			tr.RetireAt = r.RetireAt.UTC().Format(time.RFC3339)
		}
		out.Roots = append(out.Roots, tr)
	}
	return out
}
