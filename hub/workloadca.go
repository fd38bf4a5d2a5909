package hub

import (
	"context"
	"fmt"

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
	keys   *ca.Keys
	trust  *trustsvc.Service // the trust-bundle stream of the spoke shims
}

// newCA loads (or creates once, in the config cluster) the signing keys and
// builds the certificate service; it returns nil when opts.CAAddr is empty.
// Tokens are reviewed against the remote cluster each caller names, through
// the remote secrets' credentials.
func newCA(ctx context.Context, opts Options, c client.Client, clusters ca.ClusterConfigs, roots func() []federation.Root, rootsChanged <-chan struct{}, log logr.Logger, reg prometheus.Registerer) (*workloadCA, error) {
	if opts.CAAddr == "" {
		return nil, nil
	}
	keys, err := ca.LoadOrCreateKeys(ctx, c, opts.Namespace, opts.Clock.Now(), ca.KeyOptions{TrustDomain: opts.TrustDomain})
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
		Authenticator: authn, Roots: roots, Changed: rootsChanged,
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
		DefaultTTL: opts.WorkloadCertTTL, MaxTTL: opts.MaxWorkloadCertTTL,
		ServingDNSNames: names, Clock: opts.Clock, Metrics: reg, Log: log.WithName("ca"),
		Services: []func(grpc.ServiceRegistrar){trust.Register},
	})
	if err != nil {
		return nil, fmt.Errorf("hub: CA: %w", err)
	}
	log.Info("workload CA ready", "keys", keys.Source(), "trustDomain", opts.TrustDomain)
	return &workloadCA{server: srv, keys: keys, trust: trust}, nil
}

// publishRoots adds the CA's roots to the federated trust bundle, so every
// replica (and every hub of another config cluster in the federation)
// trusts them.
func (w *workloadCA) publishRoots(opts Options, add func(federation.Root) bool) error {
	roots, err := federation.ParseRootPEM(w.keys.RootsPEM(), opts.TrustDomain, federation.ReplicaID(opts.ReplicaID), opts.Clock.Now())
	if err != nil {
		return fmt.Errorf("hub: CA roots: %w", err)
	}
	for _, r := range roots {
		add(r)
	}
	return nil
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
	PEM         string `json:"pem"`
}

func trustz(roots []federation.Root) Trustz {
	out := Trustz{Roots: []TrustzRoot{}}
	for _, r := range roots {
		out.Roots = append(out.Roots, TrustzRoot{
			TrustDomain: r.TrustDomain, Fingerprint: r.Fingerprint, Source: string(r.Source),
			NotAfter: r.NotAfter.UTC().Format("2006-01-02T15:04:05Z"), PEM: string(r.PEM),
		})
	}
	return out
}

// spokez is the JSON document of /debug/spokez: the spoke shims that
// watched this replica's trust bundle (for meshfedctl remote-clusters).
func spokez(w *workloadCA) []trustsvc.SpokeStatus {
	if w == nil {
		return []trustsvc.SpokeStatus{}
	}
	return w.trust.Spokes()
}
