package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/console"
	"github.com/meshfed/meshfed/hub/credentials"
	"github.com/meshfed/meshfed/hub/debugauth"
	"github.com/meshfed/meshfed/hub/fleetstatus"
	hubconfig "github.com/meshfed/meshfed/hub/istioconfig"
	"github.com/meshfed/meshfed/hub/monitoring"
	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/replication"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/trust"
	"github.com/meshfed/meshfed/hub/trustsvc"
	"github.com/meshfed/meshfed/hub/xds"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/version"
)

// Options configure the hub. DefaultOptions gives the defaults.
type Options struct {
	// Kubeconfig of the config cluster; empty means in-cluster config.
	Kubeconfig string
	// Namespace of the remote secrets in the config cluster.
	Namespace string
	// DebugAuth guards the monitoring port's /debug documents, console and
	// pprof (hub/debugauth): a token the config cluster's TokenReview
	// accepts and whose user may get fleet.meshfed.io. Default on; off is
	// unsafe (tests and the demo).
	DebugAuth bool
	// MonitoringTLS serves the monitoring port over TLS with the CA port's
	// certificate, asking for client certificates; DebugIdentities are the
	// workload identities (SPIFFE IDs) whose mesh client certificate reads
	// it without a token.
	MonitoringTLS   bool
	DebugIdentities []string
	// XDSAddr is the plaintext ADS listen address; empty (the default)
	// turns the plaintext port off. Its streams are not authenticated:
	// whoever reaches it reads every proxy's configuration.
	XDSAddr string
	// XDSSANs are more names of the CA port's serving certificate, which
	// authenticated xDS shares: the host names (or IPs) proxies dial as
	// their discoveryAddress, or set as ISTIOD_SAN.
	XDSSANs []string
	// ConfigClusterID names the config cluster when it reviews the token
	// of an xDS caller that names no cluster (istioctl sends no
	// ClusterID): a remote cluster of that ID is asked instead.
	ConfigClusterID model.ClusterID
	// XDSMTLS makes the xDS resources ask for mTLS between workloads:
	// clusters with an UpstreamTlsContext, inbound listeners requiring
	// client certificates (certificate provider instance "default").
	XDSMTLS bool
	// XDSLimits bound the ADS streams of both xDS ports together: a cap on
	// open streams, a rate of new ones, a handshake timeout (zero values:
	// xds' defaults).
	XDSLimits xds.Limits
	// XDSServeUnknownClusters serves xDS clients whose CLUSTER_ID names no
	// cluster of the fleet; by default they are refused (InvalidArgument),
	// once the remote secrets have been read. The config cluster's ID
	// (ConfigClusterID) and an empty CLUSTER_ID are always served.
	XDSServeUnknownClusters bool
	// MonitoringAddr serves /metrics, /healthz, /readyz and /debug/.
	MonitoringAddr string
	// ReplicaID names this hub replica.
	ReplicaID federation.ReplicaID
	// ClusterSyncTimeout bounds how long readiness waits for remote
	// clusters to list; slower clusters are reported unreachable.
	ClusterSyncTimeout time.Duration
	// ClusterProbeInterval is how often each remote apiserver is probed
	// (one small list): how soon an outage is seen (the stale policy's
	// drop-after timer starts at the first failed probe) and a return
	// restarts the cluster's watches. Zero: 5s, or ClusterSyncTimeout
	// when that is shorter.
	ClusterProbeInterval time.Duration
	// DomainSuffix of service hostnames.
	DomainSuffix string
	// DiscoverySelector is a label selector of namespaces whose services
	// are discovered; empty means every namespace.
	DiscoverySelector string

	// Federation of hub replicas (package federation).
	// GossipAddr is memberlist's bind address (TCP and UDP).
	GossipAddr          string
	GossipAdvertiseAddr string
	// Join lists gossip seeds; joining is retried until one answers.
	Join []string
	// GossipKeyFile holds the gossip encryption key (16, 24 or 32 bytes,
	// raw or base64). Without it gossip is plaintext.
	GossipKeyFile string
	// PeerAddr is the replica-to-replica gRPC (mTLS) listen address;
	// PeerAdvertiseAddr is what other replicas dial (default: PeerAddr,
	// with the gossip advertise host when PeerAddr has none).
	PeerAddr, PeerAdvertiseAddr string
	// PeerTLSCert, PeerTLSKey and PeerTLSCA are PEM files for peer mTLS.
	// When unset, the hub issues its peer certificate from a CA kept in
	// the config cluster (Secret meshfed-peer-ca in Namespace), created
	// by whichever replica starts first.
	PeerTLSCert, PeerTLSKey, PeerTLSCA string
	// WatchReplicas is how many live replicas watch each remote cluster.
	WatchReplicas int

	// Workload CA (package hub/ca).
	// CAAddr is the TLS listen address of Istio's certificate API
	// (IstioCertificateService) and of authenticated xDS (ADS, CSDS), as
	// istiod's port 15012 carries both; empty disables the CA and
	// authenticated xDS.
	CAAddr string
	// TrustDomain of workload SPIFFE IDs.
	TrustDomain pki.TrustDomain
	// CAAudiences are the token audiences the CA accepts (any one).
	CAAudiences []string
	// WorkloadCertTTL is the lifetime of a certificate whose request names
	// none; MaxWorkloadCertTTL caps what a request may ask for.
	WorkloadCertTTL, MaxWorkloadCertTTL time.Duration
	// CADNSNames name the CA's serving certificate (the hub's Service
	// names); default istiod.<ns>.svc and meshfed-hub.<ns>.svc.
	CADNSNames []string
	// RootRetireGrace is how long a root dropped from the CA Secret stays
	// trusted beyond the expiry of the last leaf signed under it, for
	// clock and reload skew between replicas (see ca.KeyStore).
	RootRetireGrace time.Duration
	// RootSpread is how long a new root must have been trusted before the
	// CA signs under it; a younger one is staged (see ca.KeyStore).
	RootSpread time.Duration

	// Metrics is where the hub registers its collectors, and what
	// /metrics and the console read; nil means a registry of its own. A
	// caller that wants to see every collector (the metrics reference of
	// the docs is generated so) passes one that records them.
	Metrics MetricsRegistry

	Log   logr.Logger
	Clock clock.WithTicker
}

// MetricsRegistry registers collectors and gathers them, as a
// prometheus.Registry does.
type MetricsRegistry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// DefaultOptions returns the hub's defaults, the ports those of istiod.
func DefaultOptions() Options {
	return Options{
		Namespace:      "istio-system",
		DebugAuth:      true,
		MonitoringAddr: ":15014",
		// 30s is long enough for a large remote cluster to list on a
		// healthy network, short enough that one dead cluster does not keep
		// a new replica out of its load balancer for long.
		ClusterSyncTimeout: 30 * time.Second,
		// A dead apiserver is seen within 5s; a probe is one small list,
		// light even for many clusters.
		ClusterProbeInterval: 5 * time.Second,
		DomainSuffix:         model.DefaultDomainSuffix,
		ConfigClusterID:      "config",
		GossipAddr:           ":7946",
		PeerAddr:             ":15011",
		// One watcher per remote cluster keeps the load on remote
		// apiservers flat however many replicas serve; every replica still
		// serves every cluster from the replicated state.
		WatchReplicas: 1,
		// istiod's CA port, so istio-agent's CA_ADDR habits carry over.
		CAAddr:             ":15012",
		TrustDomain:        ca.DefaultTrustDomain,
		CAAudiences:        []string{ca.DefaultAudience},
		WorkloadCertTTL:    24 * time.Hour,
		MaxWorkloadCertTTL: 24 * time.Hour,
		RootRetireGrace:    time.Minute,
		RootSpread:         time.Minute,
		Log:                logr.Discard(),
		Clock:              clock.RealClock{},
	}
}

// Run runs the hub until ctx ends. It only builds the parts in dependency
// order and wires them; each part's construction is a function below.
func Run(ctx context.Context, opts Options) error {
	if err := opts.ReplicaID.Validate(); err != nil {
		return fmt.Errorf("hub: replica ID: %w", err)
	}
	cfg, err := configClusterConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	log := opts.Log.WithValues("replica", opts.ReplicaID)
	reg := opts.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(goCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.NewCollector())
	// One admission for both xDS ports (plaintext and the CA's TLS port).
	admission := xds.NewAdmission(opts.XDSLimits, opts.Clock, reg)

	// One scheme and one uncached client of the config cluster serve the
	// start-up reads (peer CA, workload CA keys); the manager watches.
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	configClient, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("hub: config cluster client: %w", err)
	}
	// What the replicator replicates (the store, the trust bundle, the
	// fleet status) and the ownership it keeps current come first; the
	// replicator last.
	self := opts.ReplicaID
	own := replication.NewOwnership(self, opts.WatchReplicas)
	bundle := replication.NewTrust(self, opts.Clock, log.WithName("trust"), reg)
	st := store.New(store.Options{Self: self, Clock: opts.Clock})
	rem, err := newRemotes(opts, cfg, scheme, st, own, reg, log)
	if err != nil {
		return err
	}
	caServer, authn, err := newCA(ctx, opts, cfg, configClient, rem.provider, bundle, admission, reg, log)
	if err != nil {
		return err
	}
	tracker := xdsstatus.NewTracker(string(self), opts.Clock, reg)
	var spokes fleetstatus.Spokes
	if caServer != nil {
		spokes = caServer.Spokes()
	}
	ledger := xdsstatus.NewLedger(string(self))
	// Gateways' credentials are read in their own clusters, through the
	// remote secrets' clients, by whichever replica serves the gateway.
	creds, err := credentials.New(credentials.Options{Clusters: rem.provider, Log: log.WithName("credentials"), Registerer: reg})
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	fleet := fleetstatus.New(fleetstatus.Options{Self: self, Proxies: tracker, Spokes: spokes, Config: ledger})
	xdsServer := xds.New(xds.Options{
		Addr: opts.XDSAddr, Registry: st, Log: log.WithName("xds"), Metrics: reg,
		Replica: string(self), Clock: opts.Clock,
		Security: opts.XDSMTLS, TrustDomain: opts.TrustDomain,
		Tracker: tracker, Ledger: ledger, StatusSource: fleet, Authn: authn,
		Admission:    admission,
		KnownCluster: rem.knownCluster(opts),
		Credentials:  creds,
	})
	if caServer != nil {
		// The authenticated xDS shares the CA's TLS port (15012).
		caServer.Register(xdsServer.RegisterAuthenticated)
	}
	// Every replica reads the mesh's Istio config; one per object writes
	// its status.
	config, err := hubconfig.New(hubconfig.Options{
		Config: cfg, DomainSuffix: opts.DomainSuffix, RootNamespace: opts.Namespace, Log: log.WithName("istioconfig"),
		Registerer: reg, Clock: opts.Clock,
		OnChange:    xdsServer.SetConfig,
		WriteStatus: func(k istioconfig.Key) bool { return own.Writes(k.String()) },
	})
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	repl, err := newReplicator(ctx, opts, configClient,
		replication.Deps{Store: st, Trust: bundle, Proxies: fleet, Ownership: own}, log, reg)
	if err != nil {
		return err
	}
	docs := &documents{self: self, opts: opts, st: st, status: rem.status, bundle: bundle, fleet: fleet, config: config, repl: repl,
		explain: &explainer{replica: string(self), domainSuffix: opts.DomainSuffix, proxies: fleet.All, explain: xdsServer.Explain}}
	ui, err := docs.console(reg, log)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	ready := remotes.NewReadiness(remotes.ReadinessOptions{
		Provider: rem.provider, Status: rem.status, Held: st, SyncTimeout: opts.ClusterSyncTimeout, Clock: opts.Clock,
	})
	monOpts := monitoring.Options{
		Addr:     opts.MonitoringAddr,
		Gatherer: reg,
		Ready: func() (bool, string) {
			// As istiod, serve only once the config is read: a proxy
			// must not get routes that ignore the mesh's VirtualServices.
			if !config.Synced() {
				return false, "Istio config not read yet"
			}
			return ready.Check()
		},
		Debug:   docs.debug(),
		Console: ui,
		Log:     log.WithName("monitoring"),
	}
	if opts.DebugAuth {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("hub: config cluster client: %w", err)
		}
		guard := debugauth.New(debugauth.Options{Reviewer: debugauth.KubeReviewer{Client: cs}, Clock: opts.Clock,
			Log: log.WithName("debugauth"), Metrics: reg, Identities: opts.DebugIdentities, Roots: authn.Roots})
		monOpts.Protect, monOpts.Login, monOpts.Logout = guard.Wrap, guard.Login, guard.Logout
	} else {
		log.Info("the monitoring port's /debug documents, console and pprof answer anyone (--debug-auth=false): unsafe outside a test")
	}
	if opts.MonitoringTLS {
		if caServer == nil {
			return errors.New("hub: --monitoring-tls needs the CA (--ca-addr): the port serves its certificate")
		}
		monOpts.TLS = caServer.TLSConfig()
	}
	mon := monitoring.New(monOpts)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rem.mgr.Start(ctx) })
	g.Go(func() error { return xdsServer.Run(ctx) })
	g.Go(func() error { return mon.Run(ctx) })
	g.Go(func() error { return repl.Run(ctx) })
	g.Go(func() error { ui.Run(ctx); return nil })
	g.Go(func() error { return config.Run(ctx) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-own.WritersChanged():
				config.RecheckStatus()
			}
		}
	})
	// What only the serving side knows of Gateways (a selector no Pod
	// has, a credential that cannot be read) joins their status.
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-xdsServer.GatewayWarningsChanged():
				config.SetExternalWarnings("xds", xdsServer.GatewayWarnings())
				// At most one pass over the registry a gatewayCheckInterval:
				// signals meanwhile coalesce.
				select {
				case <-ctx.Done():
					return nil
				case <-opts.Clock.After(gatewayCheckInterval):
				}
			}
		}
	})
	if caServer != nil {
		g.Go(func() error { return caServer.Run(ctx, opts.CAAddr) })
	}
	return g.Wait()
}

// gatewayCheckInterval spaces the checks of Gateways against the registry
// (xds.Server.GatewayWarnings, a pass over every endpoint when Istio
// Gateways exist): pushes come in bursts during endpoint churn, and a
// warning a second late costs nothing.
const gatewayCheckInterval = time.Second

// remoteParts are the parts that watch the remote clusters: the provider
// of their clients (from the remote secrets), the watcher that feeds the
// store, their status, and the manager that runs them.
type remoteParts struct {
	provider *remotes.Provider
	status   *remotes.Status
	mgr      mcmanager.Manager
}

// newRemotes builds the parts that watch the remote clusters into st.
func newRemotes(opts Options, cfg *rest.Config, scheme *runtime.Scheme, st *store.Store, own *replication.Ownership,
	reg prometheus.Registerer, log logr.Logger) (remoteParts, error) {
	var selector labels.Selector
	if opts.DiscoverySelector != "" {
		var err error
		if selector, err = labels.Parse(opts.DiscoverySelector); err != nil {
			return remoteParts{}, fmt.Errorf("hub: discovery selector: %w", err)
		}
	}
	status := remotes.NewStatus(opts.Clock, reg)
	remotes.RegisterNetworkMetrics(reg, st.NetworkGateways)
	provider := remotes.NewProvider(remotes.ProviderOptions{
		Remover: st, Status: status, Ownership: own, Log: log.WithName("remotes"), Clock: opts.Clock,
		Namespace: opts.Namespace, ProbeInterval: opts.ClusterProbeInterval,
	})
	watcher := remotes.NewWatcher(remotes.WatcherOptions{
		Sink: st, Status: status, DomainSuffix: opts.DomainSuffix,
		DiscoverySelector: selector, SyncTimeout: opts.ClusterSyncTimeout,
		ProbeInterval: opts.ClusterProbeInterval,
		Reconnect:     provider.Reconnect,
		Clock:         opts.Clock, Log: log.WithName("watcher"),
	})
	mgr, err := mcmanager.New(cfg, provider, manager.Options{
		Scheme:                 scheme,
		Cache:                  remotes.SecretCacheOptions(opts.Namespace),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 log.WithName("manager"),
	})
	if err != nil {
		return remoteParts{}, fmt.Errorf("hub: manager: %w", err)
	}
	provider.SetupWithManager(mgr.GetLocalManager())
	if err := mgr.Add(watcher); err != nil {
		return remoteParts{}, err
	}
	return remoteParts{provider: provider, status: status, mgr: mgr}, nil
}

// knownCluster says whether a node's CLUSTER_ID names a cluster of the
// fleet (xds.Options.KnownCluster).
func (r remoteParts) knownCluster(opts Options) func(id model.ClusterID) (known, decided bool) {
	return func(id model.ClusterID) (known, decided bool) {
		switch {
		case opts.XDSServeUnknownClusters || id == opts.ConfigClusterID:
			return true, true
		case !r.provider.Synced():
			return false, false // a starting replica: the secrets are not read yet
		}
		_, known = r.status.Get(id)
		return known, true
	}
}

// newCA builds the workload CA, which owns the authenticated port, and
// the authentication the xDS streams on that port share with it; none
// without --ca-addr.
func newCA(ctx context.Context, opts Options, cfg *rest.Config, configClient client.WithWatch, provider *remotes.Provider,
	bundle *replication.Trust, admission *xds.Admission, reg prometheus.Registerer, log logr.Logger) (*trust.CA, xds.Authn, error) {
	if opts.CAAddr == "" {
		return nil, xds.Authn{}, nil
	}
	clusters := configClusterAnd{ClusterConfigs: provider, id: opts.ConfigClusterID, cfg: cfg}
	tokens, err := ca.NewAuthenticator(ca.AuthenticatorOptions{
		Clusters: clusters, Audiences: opts.CAAudiences, Clock: opts.Clock, Metrics: reg,
	})
	if err != nil {
		return nil, xds.Authn{}, fmt.Errorf("hub: token authenticator: %w", err)
	}
	authn := xds.Authn{
		Tokens: tokens, ConfigCluster: opts.ConfigClusterID,
		// The CA publishes its roots to the bundle before it serves.
		Roots: func() []byte { return trustsvc.BundleOf(bundle.TrustRoots()).PEM() },
	}
	dns, ips := caServingNames(opts)
	caServer, err := trust.New(ctx, trust.Options{
		Client: configClient, Namespace: opts.Namespace, Replica: opts.ReplicaID,
		TrustDomain: opts.TrustDomain, Audiences: opts.CAAudiences, Clusters: clusters, Bundle: bundle,
		Authenticator: tokens,
		CertTTL:       opts.WorkloadCertTTL, MaxCertTTL: opts.MaxWorkloadCertTTL, DNSNames: dns, IPs: ips,
		RetireGrace: opts.RootRetireGrace, RootSpread: opts.RootSpread,
		GRPCOptions: admission.ServerOptions(),
		Clock:       opts.Clock, Metrics: reg, Log: log,
	})
	if err != nil {
		return nil, xds.Authn{}, fmt.Errorf("hub: %w", err)
	}
	return caServer, authn, nil
}

// documents are the sources of what /debug serves and the console shows.
type documents struct {
	self    federation.ReplicaID
	opts    Options
	st      *store.Store
	status  *remotes.Status
	bundle  *replication.Trust
	fleet   *fleetstatus.Fleet
	config  *hubconfig.Watcher
	repl    *replication.Replicator
	explain *explainer
}

func (d *documents) registryz() debugdoc.Registryz {
	return remotes.Registryz(string(d.self), d.st, d.status)
}

func (d *documents) trustz() debugdoc.Trustz { return trust.Trustz(d.bundle.TrustRoots()) }

func (d *documents) spokez() debugdoc.Spokez { return d.fleet.Spokes(d.opts.Clock.Now()) }

// console builds the web console over the documents.
func (d *documents) console(reg prometheus.Gatherer, log logr.Logger) (*console.Console, error) {
	return console.New(console.Options{
		Replica: string(d.self), Gatherer: reg, Clock: d.opts.Clock, Log: log.WithName("console"),
		Sources: console.Sources{
			Registryz: d.registryz, Federationz: d.repl.Federationz, Proxies: d.fleet.All,
			Trustz: d.trustz, Spokez: d.spokez,
			Explain: d.explain.Explain, Configz: d.config.Configz,
		},
	})
}

// debug returns the /debug documents by name.
func (d *documents) debug() map[string]func(*http.Request) any {
	return map[string]func(*http.Request) any{
		debugdoc.RegistryzName: func(*http.Request) any {
			// The digest is for readers of the document only: the
			// console, which reads registryz every refresh, needs none.
			doc := d.registryz()
			doc.Digest = debugdoc.ServicesDigest(doc.Services)
			return doc
		},
		debugdoc.FederationzName:  func(*http.Request) any { return d.repl.Federationz() },
		debugdoc.ProxyStatusName:  func(*http.Request) any { return proxystatus.JSONDocument{Proxies: d.fleet.All()} },
		debugdoc.TrustzName:       func(*http.Request) any { return d.trustz() },
		debugdoc.SpokezName:       func(*http.Request) any { return d.spokez() },
		debugdoc.ClusterzName:     func(*http.Request) any { return remotes.Clusterz(d.status) },
		debugdoc.ConfigzName:      func(*http.Request) any { return d.config.Configz() },
		debugdoc.ConfigStatusName: func(r *http.Request) any { return configStatus(d.fleet, d.config.Configz(), r) },
		debugdoc.ExplainzName:     d.explain.serve,
	}
}

// configClusterAnd gives the remote clusters' configurations, and the
// config cluster's own under id when no remote cluster has that ID: the
// config cluster reviews the tokens of callers that name no cluster.
type configClusterAnd struct {
	ca.ClusterConfigs
	id  model.ClusterID
	cfg *rest.Config
}

func (c configClusterAnd) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	if cfg, ok := c.ClusterConfigs.ClusterConfig(id); ok {
		return cfg, true
	}
	if id != "" && id == c.id {
		return c.cfg, true
	}
	return nil, false
}

// istiodSAN is the name pilot-agent checks the control plane's certificate
// for when its discoveryAddress is a localhost one (Istio's
// pilot/pkg/grpc/tls.go); otherwise it checks the address's host, or
// ISTIOD_SAN when set.
const istiodSAN = "istiod.istio-system.svc"

// caServingNames are the DNS names and IPs of the CA port's certificate:
// the CA's names (trust.DefaultDNSNames unless --ca-dns-names), the name
// pilot-agent checks for a localhost discoveryAddress, and every
// --xds-san, an IP becoming an IP SAN.
func caServingNames(opts Options) ([]string, []net.IP) {
	dns := opts.CADNSNames
	if len(dns) == 0 {
		dns = trust.DefaultDNSNames(opts.Namespace)
	}
	dns = append(slices.Clone(dns), istiodSAN)
	var ips []net.IP
	for _, san := range opts.XDSSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	slices.Sort(dns)
	return slices.Compact(dns), ips
}

func configClusterConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("hub: in-cluster config (pass --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("hub: config cluster kubeconfig: %w", err)
	}
	return cfg, nil
}

// configStatus answers /debug/configstatusz (fleetstatus.Fleet.ConfigStatus),
// ?kind=&namespace=&name= naming one object.
func configStatus(fleet *fleetstatus.Fleet, configz debugdoc.Configz, r *http.Request) proxystatus.ConfigStatusz {
	q := proxystatus.RolloutQuery{Kind: r.URL.Query().Get("kind"), Namespace: r.URL.Query().Get("namespace"), Name: r.URL.Query().Get("name")}
	return fleet.ConfigStatus(q, configz)
}

// goCollector exports the Go runtime's usual go_* metrics and, beside
// them, go_gc_heap_live_bytes: the heap the last collection found live.
// go_memstats_heap_alloc_bytes also counts garbage not yet collected (up to
// about as much again under GOGC=100), so the live heap is the figure to
// watch for what the hub really holds, e.g. during a reconnect storm.
func goCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)},
	))
}
