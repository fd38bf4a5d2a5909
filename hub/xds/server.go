package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Registry is what the xDS server reads: the merged services and the
// notification of which hostnames changed. *store.Store is one.
type Registry interface {
	Changed() <-chan struct{}
	TakeChanged() []model.Hostname
	Service(model.Hostname) *model.MergedService
	Services() []*model.MergedService
	// NetworkGateways is the fleet's networks and their gateways.
	NetworkGateways() *model.NetworkGateways
	// ClusterNetwork is a cluster's network ("" unknown).
	ClusterNetwork(model.ClusterID) model.Network
}

// Options configure a Server.
type Options struct {
	// Addr is the plaintext ADS listen address, e.g. ":15010"; empty
	// serves no plaintext port. Streams there are not authenticated: any
	// client that reaches it reads the mesh (in-cluster and test use).
	Addr     string
	Registry Registry
	Log      logr.Logger
	Metrics  prometheus.Registerer
	// Replica names this hub replica in proxy status (the HUB column).
	Replica string
	// Clock times proxy status and push durations and drives every wait of
	// the server (NACK backoff, shutdown grace); nil means the real clock.
	Clock clock.WithTicker
	// Security turns on mTLS in the generated resources: clusters carry an
	// UpstreamTlsContext and inbound (server-side) listeners a
	// DownstreamTlsContext that requires client certificates. Every proxy
	// then needs the certificate provider instance "default" in its
	// bootstrap (grpc-go rejects the clusters otherwise), so it is off
	// unless asked for (the hub's --xds-mtls flag).
	Security bool
	// TrustDomain of the SPIFFE IDs that clusters accept; empty means
	// cluster.local.
	TrustDomain pki.TrustDomain
	// NACKBackoff holds back the answer to a proxy that keeps rejecting
	// what it is sent (see nackBackoff); zero values take the defaults.
	NACKBackoff Backoff
	// Tracker is fed the ACK/NACK of every stream of the server; nil means
	// a tracker of the server's own (xdsstatus.NewTracker with Replica, Clock
	// and Metrics). The hub builds it first, so that its fleet status can
	// read it and be the xdsstatus.StatusSource.
	Tracker *xdsstatus.Tracker
	// Ledger keeps the config epochs of the server's responses; nil means
	// one of the server's own. The hub builds it first, so that its fleet
	// status can replicate it.
	Ledger *xdsstatus.Ledger
	// StatusSource is what CSDS answers from; nil means the tracker, that
	// is this replica's proxies only.
	StatusSource xdsstatus.StatusSource
	// Admission limits the ADS streams of the plaintext port; the hub
	// builds it first and gives the CA's port the same one
	// (Admission.ServerOptions), so that the limits hold for both. Nil
	// means one of the server's own with the default Limits, unmetered.
	Admission *Admission
	// Authn authenticates the streams of the services RegisterAuthenticated
	// puts on another gRPC server (the CA's TLS port). The plaintext port
	// does not use it.
	Authn Authn
	// KnownCluster, when set, says whether a node's CLUSTER_ID names a
	// cluster of the fleet: a stream whose first request names another is
	// refused (InvalidArgument, counted as unknown_cluster), so that what
	// a client claims cannot make the hub hold state for clusters that do
	// not exist. decided is false while the answer cannot be known yet
	// (a starting hub has not read the remote secrets): then it passes.
	// A node without CLUSTER_ID (istioctl) always passes.
	KnownCluster func(id model.ClusterID) (known, decided bool)
	// Credentials reads the Secrets that Envoy proxies name by
	// credentialName, in their own clusters; nil serves no credential
	// (the SDS names kubernetes://... stay unanswered).
	Credentials Credentials
}

// genOptions are the xdsgen options of these server options.
func (o Options) genOptions() xdsgen.Options {
	return xdsgen.Options{Security: o.Security, TrustDomain: o.TrustDomain}
}

// Server is the hub's xDS server.
type Server struct {
	opts    Options
	clk     clock.WithTicker
	cache   *groupCache
	metrics *metrics
	status  *xdsstatus.Tracker
	nacks   *nackBackoff
	nackLog *rate.Limiter // first NACKs of streams logged at info level
	// unservedLog bounds the info-level logs of requests of types the
	// hub does not serve to the asking proxy.
	unservedLog *rate.Limiter
	// nets are the network gateways of the last push, and problemLog
	// bounds the logs of their new problems; the push loop's alone.
	nets       *model.NetworkGateways
	problemLog *rate.Limiter
	csds       *xdsstatus.CSDS
	ledger     *xdsstatus.Ledger // config epochs (ConfigLedger)
	authn      *authenticator
	// xds is the one stream server of every port, so that stream IDs
	// (the keys of status, NACK backoff and groups) are unique across
	// ports. It lives until stop, called when Run ends.
	xds   *ads.Server
	stop  context.CancelFunc
	ready chan struct{}
	addr  net.Addr
	// config is the newest Istio configuration (SetConfig); the push loop
	// applies it.
	config configBox
	// credentialReports are the credentials not served, for
	// GatewayWarnings; gatewayChecks signals (capacity 1) a change.
	credentialReports credentialReports
	gatewayChecks     chan struct{}
}

// configBox holds the newest Istio configuration handed to the server and
// signals the push loop that there is one.
type configBox struct {
	mu      sync.Mutex // guards snap
	snap    *istioconfig.Snapshot
	changed chan struct{} // capacity 1
}

func (b *configBox) set(s *istioconfig.Snapshot) {
	b.mu.Lock()
	b.snap = s
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default: // a signal is pending already; it will read s
	}
}

func (b *configBox) get() *istioconfig.Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.snap
}

// SetConfig hands the server a new Istio configuration (a nil one means
// none). The push loop rebuilds the resources of the hosts whose
// configuration changed; a burst of calls costs one push.
func (s *Server) SetConfig(snap *istioconfig.Snapshot) { s.config.set(snap) }

// New returns a Server; Run serves it.
func New(opts Options) *Server {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Server{
		opts:    opts,
		clk:     clk,
		metrics: newMetrics(opts.Metrics),
		ready:   make(chan struct{}),
		config:  configBox{changed: make(chan struct{}, 1)},

		gatewayChecks: make(chan struct{}, 1),
	}
	s.status = opts.Tracker
	if s.status == nil {
		s.status = xdsstatus.NewTracker(opts.Replica, clk, opts.Metrics)
	}
	s.nacks = newNACKBackoff(opts.NACKBackoff, clk)
	s.nackLog = rate.NewLimiter(nackLogRate, nackLogBurst)
	var src xdsstatus.StatusSource = s.status
	if opts.StatusSource != nil {
		src = opts.StatusSource
	}
	s.csds = xdsstatus.NewCSDS(src)
	s.ledger = opts.Ledger
	if s.ledger == nil {
		s.ledger = xdsstatus.NewLedger(opts.Replica)
	}
	s.status.UseEpochs(s.ledger.EpochOf)
	s.cache = newGroupCache(opts.genOptions(), func() []*model.MergedService { return s.opts.Registry.Services() }, s.metrics, s.ledger)
	s.cache.clusterNetwork = s.opts.Registry.ClusterNetwork
	s.cache.debug = xdsstatus.NewDebugTypes(src, opts.Replica)
	s.unservedLog = rate.NewLimiter(refusalLogRate, refusalLogBurst)
	s.problemLog = rate.NewLimiter(refusalLogRate, refusalLogBurst)
	s.cache.unserved = s.logUnserved
	if opts.Credentials != nil {
		s.cache.credentials = func(cluster model.ClusterID, namespace string) *nodeCredentials {
			return newNodeCredentials(s, s.ledger, cluster, namespace)
		}
	}
	s.authn = newAuthenticator(opts.Authn, clk, opts.Log.WithName("authn"), opts.Metrics)
	// The stream server's context ends streams when Run ends; New starts
	// no goroutine, so an unrun Server holds nothing. Its streams, SotW
	// and Delta, are ordered: every type's answers leave in the order
	// the caches gave them, and an Envoy cluster's load assignment is
	// sent again after the cluster (ads.Rewarming).
	ctx, stop := context.WithCancel(context.Background())
	s.xds, s.stop = ads.NewServer(ctx, s.cache, s), stop
	return s
}

// RegisterAuthenticated registers ADS (SotW and Delta) and CSDS on r, a
// gRPC server with TLS whose client certificates are not verified by the
// handshake (the CA's, see ca.Server.TLSConfig): each stream is
// authenticated by Options.Authn and held against its node at its first
// request, each CSDS call authenticated. Streams are served by the same
// stream server and caches as the plaintext port's, and end when Run ends.
// r's server should carry the ServerOptions of Options.Admission.
func (s *Server) RegisterAuthenticated(r grpc.ServiceRegistrar) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(r, authenticatedADS{inner: s.xds})
	statusv3.RegisterClientStatusDiscoveryServiceServer(r, authenticatedCSDS{inner: s.csds, authn: s.authn})
}

// Status returns the tracker of this replica's proxies' sync status.
func (s *Server) Status() *xdsstatus.Tracker { return s.status }

// Addr returns the address the plaintext port listens on, once Run has
// bound it; nil when Options.Addr is empty.
func (s *Server) Addr() net.Addr {
	<-s.ready
	return s.addr
}

// Run pushes registry changes until ctx ends, and serves the plaintext
// port unless Options.Addr is empty. The streams of every port end with it.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop()
	if s.opts.Addr == "" {
		close(s.ready)
		s.pushAll()
		s.opts.Log.Info("no plaintext xDS port")
		s.pushLoop(ctx)
		return nil
	}
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		close(s.ready)
		return fmt.Errorf("xds: %w", err)
	}
	s.addr = lis.Addr()
	close(s.ready)
	adm := s.opts.Admission
	if adm == nil {
		adm = NewAdmission(Limits{}, s.clk, nil)
	}
	gs := grpc.NewServer(adm.ServerOptions()...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s.xds)
	statusv3.RegisterClientStatusDiscoveryServiceServer(gs, s.csds)

	s.pushAll()
	go s.pushLoop(ctx)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.opts.Log.Info("serving xDS", "addr", s.addr.String())
	select {
	case <-ctx.Done():
		// Streams end with the stream server's context; give in-flight
		// responses a moment, then cut.
		s.stop()
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-s.clk.After(2 * time.Second):
			gs.Stop()
		}
		return nil
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return fmt.Errorf("xds: %w", err)
	}
}

func (s *Server) pushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Registry.Changed():
			s.push(s.opts.Registry.TakeChanged(), false)
		case <-s.config.changed:
			s.push(s.opts.Registry.TakeChanged(), true)
		case <-s.cache.adoptions():
			s.cache.adoptBuilt()
		}
	}
}

func (s *Server) pushAll() {
	var hs []model.Hostname
	for _, ms := range s.opts.Registry.Services() {
		hs = append(hs, ms.Service.Hostname)
	}
	s.push(hs, true)
}

// push brings the caches in line with the registry for hostnames hs, and
// with the newest Istio configuration for the hostnames it changes: the
// planner (xdsgen.Planner) computes what changed, and push writes it.
// Without configChanged, an empty hs is nothing to do.
func (s *Server) push(hs []model.Hostname, configChanged bool) {
	if len(hs) == 0 && !configChanged {
		return
	}
	start := s.clk.Now()
	nets := s.opts.Registry.NetworkGateways()
	if nets != s.nets {
		s.logNetworkProblems(s.nets, nets)
		s.nets = nets
	}
	for _, w := range s.cache.plan(hs, s.opts.Registry.Service, s.config.get(), nets) {
		if err := s.cache.apply(w); err != nil {
			s.opts.Log.Error(err, "updating xDS cache", "type", w.typeURL)
			continue
		}
		s.metrics.pushes.WithLabelValues(xdsstatus.TypeLabel(w.typeURL)).Inc()
	}
	if s.cache.seal() {
		// Every proxy's ACKed versions may hold the new epoch now.
		s.status.TouchAll()
	}
	s.metrics.pushDuration.Observe(s.clk.Since(start).Seconds())
	s.signalGatewayChecks()
}

// logNetworkProblems logs, at most refusalLogRate a second (the rest at
// debug level), the problems of the network gateways in next that were not
// in prev; all of them are in /debug/registryz and counted in
// meshfed_network_gateway_problems.
func (s *Server) logNetworkProblems(prev, next *model.NetworkGateways) {
	var old []model.NetworkProblem
	if prev != nil {
		old = prev.Problems
	}
	for _, p := range next.Problems {
		if slices.Contains(old, p) {
			continue
		}
		log := s.opts.Log.V(1)
		if s.problemLog.AllowN(s.clk.Now(), 1) {
			log = s.opts.Log
		}
		log.Info("network gateway problem: other networks may not reach this network's endpoints", "network", p.Network,
			"cluster", p.Cluster, "service", p.Service, "reason", p.Reason, "problem", p.Message)
	}
}

// Ledger returns the server's config ledger.
func (s *Server) Ledger() *xdsstatus.Ledger { return s.ledger }

// The rate at which first NACKs of streams are logged at info level.
const (
	nackLogRate  = 10 // a second
	nackLogBurst = 50
)

// The rate at which requests of unserved types are logged at info level;
// the rest at debug level.
const (
	refusalLogRate  = 1 // a second
	refusalLogBurst = 10
)

// logUnserved counts, and logs at a bounded rate, a request of a type the
// proxy gets nothing of (groupCache.unservedWatch).
func (s *Server) logUnserved(typeURL string, node *corev3.Node) {
	s.metrics.unserved.WithLabelValues(xdsstatus.TypeLabel(typeURL)).Inc()
	log := s.opts.Log.V(1)
	if s.unservedLog.AllowN(s.clk.Now(), 1) {
		log = s.opts.Log
	}
	log.Info("proxy asked for a type this hub does not serve it: the type gets no resources",
		"type", xdsstatus.Clip(typeURL, maxLoggedDetailBytes), "node", xdsstatus.Clip(node.GetId(), maxLoggedDetailBytes))
}

// requestChecked refuses a request whose node (of metadata md) exceeds
// the limits (checkNodeSize) or names a cluster the fleet does not have
// (Options.KnownCluster), counting it.
func (s *Server) requestChecked(node *corev3.Node, md xdsnode.Metadata) error {
	reason := reasonNodeTooLarge
	err := checkNodeSize(node, md)
	if err == nil {
		reason, err = reasonUnknownCluster, s.checkCluster(md.ClusterID)
	}
	if err != nil {
		s.metrics.refused.WithLabelValues(reason).Inc()
		s.opts.Log.Info("xDS request refused", "reason", reason, "node", xdsstatus.Clip(node.GetId(), maxLoggedDetailBytes), "error", err.Error())
	}
	return err
}

// checkCluster refuses a node whose CLUSTER_ID, id, names no cluster of
// the fleet (see Options.KnownCluster).
func (s *Server) checkCluster(id model.ClusterID) error {
	if s.opts.KnownCluster == nil {
		return nil
	}
	if id == "" {
		return nil
	}
	if known, decided := s.opts.KnownCluster(id); decided && !known {
		return grpcstatus.Error(codes.InvalidArgument, fmt.Sprintf(
			"xds: %s %q names no cluster of this fleet (no remote secret names it): set the proxy's cluster ID to the cluster it runs in", xdsnode.MetadataClusterID, id))
	}
	return nil
}
