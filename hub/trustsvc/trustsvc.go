package trustsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/remotesecret"
	"github.com/meshfed/meshfed/pkg/trustapi"
)

// Authenticator turns a spoke's bearer token into its identity;
// *ca.Authenticator implements it.
type Authenticator interface {
	Authenticate(ctx context.Context, cluster model.ClusterID, token string) (ca.Identity, error)
}

// Options configure a Service.
type Options struct {
	// Authenticator reviews the caller's token. Required.
	Authenticator Authenticator
	// Roots returns the current federated bundle
	// (Replicator.TrustRoots). Required.
	Roots func() []federation.Root
	// Changed signals, coalesced, that Roots changed
	// (Replicator.TrustChanged()). Only Run reads it. Nil: the bundle is
	// sent once per stream and never again.
	Changed <-chan struct{}
	// Log receives structured logs.
	Log logr.Logger
	// Metrics, when set, receives meshfed_hub_trust_streams{client} (client
	// "spoke" or "agent") and meshfed_hub_trust_pushes_total{result}.
	Metrics prometheus.Registerer
	// Clock dates the spokes' status and times each stream's end at its
	// token's expiry. Default the real clock.
	Clock clock.WithTicker
}

// SpokeStatus is what the hub knows of one cluster's spoke: the entry of
// /debug/spokez, declared once in pkg/debugdoc. Hubs is empty in
// Service.Spokes, which is one replica's view; the fleet-wide merge
// (hub/fleetstatus) names the replicas holding the streams.
type SpokeStatus = debugdoc.Spoke

// Service implements trustapi.TrustBundleServer.
type Service struct {
	opts Options

	// mu guards notify and spokes, and the SpokeStatus values spokes
	// points to. It is held only to read or swap them: no send, no
	// encoding and no call out happens under it.
	mu     sync.Mutex
	notify chan struct{} // closed and replaced on every change
	spokes map[model.ClusterID]*SpokeStatus

	// spokesChanged signals (coalesced) a change of Spokes, other than
	// the passing of time. Set once by New; sends need no lock.
	spokesChanged chan struct{}
	// stopping is closed when Run returns: every stream then ends, so a
	// graceful stop of the gRPC server need not wait for its grace period
	// (the streams would otherwise stay open for as long as their clients).
	stopping chan struct{}

	streams *prometheus.GaugeVec
	pushes  *prometheus.CounterVec
}

// New returns a Service; call Run for change fan-out and Register to serve.
func New(opts Options) (*Service, error) {
	if opts.Authenticator == nil || opts.Roots == nil {
		return nil, errors.New("trustsvc: Options.Authenticator and Roots are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	s := &Service{
		opts:          opts,
		notify:        make(chan struct{}),
		spokes:        map[model.ClusterID]*SpokeStatus{},
		spokesChanged: make(chan struct{}, 1),
		stopping:      make(chan struct{}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshfed_hub_trust_streams",
			Help: "Open trust-bundle Watch streams, by client: spoke (spoke shims) or agent (workload agents).",
		}, []string{"client"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_hub_trust_pushes_total", Help: "Trust bundles sent to spoke shims and workload agents, by result.",
		}, []string{"result"}),
	}
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(s.streams); err != nil {
			return nil, fmt.Errorf("trustsvc: metrics: %w", err)
		}
		if err := opts.Metrics.Register(s.pushes); err != nil {
			return nil, fmt.Errorf("trustsvc: metrics: %w", err)
		}
	}
	return s, nil
}

// Register serves the Service on s (the CA's gRPC server).
func (s *Service) Register(r grpc.ServiceRegistrar) { trustapi.RegisterTrustBundleServer(r, s) }

// Register is New followed by Service.Register; the caller still runs Run.
func Register(r grpc.ServiceRegistrar, opts Options) (*Service, error) {
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	s.Register(r)
	return s, nil
}

// Run fans Options.Changed out to every stream until ctx ends; then it ends
// the streams (codes.Unavailable: the clients reconnect to another
// replica).
func (s *Service) Run(ctx context.Context) error {
	defer close(s.stopping)
	if s.opts.Changed == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.opts.Changed:
			s.Notify()
		}
	}
}

// Notify wakes every stream to compare the bundle with what it last sent.
func (s *Service) Notify() {
	s.mu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
}

func (s *Service) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// Bundle converts the current roots into the wire bundle.
func (s *Service) Bundle() trustapi.Bundle { return BundleOf(s.opts.Roots()) }

// BundleOf converts federation roots into the wire bundle.
func BundleOf(roots []federation.Root) trustapi.Bundle {
	out := make([]trustapi.Root, 0, len(roots))
	for _, r := range roots {
		out = append(out, trustapi.Root{TrustDomain: pki.TrustDomain(r.TrustDomain), PEM: string(r.PEM), Fingerprint: r.Fingerprint})
	}
	return trustapi.NewBundle(out)
}

// Watch implements trustapi.TrustBundleServer.
func (s *Service) Watch(_ *wrapperspb.BytesValue, stream grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
	ctx := stream.Context()
	cluster, token, version, err := credentialsFrom(ctx)
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	client := clientOf(ctx)
	id, err := s.opts.Authenticator.Authenticate(ctx, cluster, token)
	if err != nil {
		s.opts.Log.V(1).Info("trust bundle watch refused", "cluster", cluster, "err", err.Error())
		switch {
		case ca.IsUnauthenticated(err):
			return status.Error(codes.Unauthenticated, err.Error())
		case errors.Is(err, context.Canceled):
			return status.Error(codes.Canceled, err.Error())
		default:
			return status.Error(codes.Unavailable, err.Error())
		}
	}
	streams := s.streams.WithLabelValues(client)
	streams.Inc()
	defer streams.Dec()
	spoke := client == trustapi.ClientSpoke
	var log logr.Logger
	if spoke {
		s.connected(cluster, id, version)
		defer s.disconnected(cluster)
		log = s.opts.Log.WithValues("cluster", cluster, "spokeVersion", version)
		log.Info("spoke watching the trust bundle", "identity", id.String())
	} else {
		// One per workload: too many to log at the default level.
		log = s.opts.Log.WithValues("cluster", cluster, "client", client, "identity", id.String())
		log.V(1).Info("agent watching the trust bundle")
	}

	// A stream lives no longer than the token that opened it: when it
	// expires the client reconnects with a fresh one, reviewed again, so a
	// revoked identity stops getting updates by then. Tokens without exp
	// (legacy Secret-based ones) keep their stream.
	var expired <-chan time.Time
	if exp := remotesecret.TokenExpiry(token); !exp.IsZero() {
		t := s.opts.Clock.NewTimer(max(exp.Sub(s.opts.Clock.Now()), 0))
		defer t.Stop()
		expired = t.C()
	}

	var sent string
	for {
		wake := s.changed() // before reading, so no change is missed
		b := s.Bundle()
		if b.Version != sent {
			m, err := trustapi.Encode(b)
			if err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			if err := stream.Send(m); err != nil {
				s.pushes.WithLabelValues("error").Inc()
				log.V(1).Info("trust bundle stream ended", "err", err.Error())
				return err
			}
			s.pushes.WithLabelValues("sent").Inc()
			sent = b.Version
			if spoke {
				s.sent(cluster, sent)
			}
			log.V(1).Info("sent trust bundle", "version", sent, "roots", len(b.Roots))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return status.Error(codes.Unavailable, "trustsvc: the hub is shutting down")
		case <-expired:
			return status.Error(codes.Unauthenticated, "trustsvc: the stream's token expired; reconnect with a fresh one")
		case <-wake:
		}
	}
}

func (s *Service) connected(c model.ClusterID, id ca.Identity, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.spokes[c]
	if st == nil {
		st = &SpokeStatus{Cluster: c}
		s.spokes[c] = st
	}
	now := s.opts.Clock.Now()
	st.Version, st.Identity, st.ConnectedAt, st.LastSeen = version, id.String(), now, now
	st.Streams++
	s.spokesChangedLocked()
}

// SpokesChanged signals, coalesced, that Spokes changed: a stream opened or
// closed, or sent another bundle version.
func (s *Service) SpokesChanged() <-chan struct{} { return s.spokesChanged }

// spokesChangedLocked signals spokesChanged without blocking. Called with
// mu held, right after the change it reports.
func (s *Service) spokesChangedLocked() {
	select {
	case s.spokesChanged <- struct{}{}:
	default:
	}
}

func (s *Service) disconnected(c model.ClusterID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.spokes[c]; st != nil {
		st.Streams--
		st.LastSeen = s.opts.Clock.Now()
		s.spokesChangedLocked()
	}
}

func (s *Service) sent(c model.ClusterID, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.spokes[c]; st != nil && st.BundleVersion != version {
		st.BundleVersion = version
		s.spokesChangedLocked()
	}
}

// Spokes returns every cluster whose spoke ever watched, sorted by cluster.
func (s *Service) Spokes() []SpokeStatus {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	out := make([]SpokeStatus, 0, len(s.spokes))
	for _, st := range s.spokes {
		v := *st
		v.Healthy = v.Streams > 0
		if v.Healthy {
			v.LastSeen = now
		}
		out = append(out, v)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b SpokeStatus) int { return strings.Compare(string(a.Cluster), string(b.Cluster)) })
	return out
}

// clientOf reads the x-meshfed-client metadata: trustapi.ClientAgent, or
// trustapi.ClientSpoke for anything else (absent from older spokes). The
// result is a metric label, so it has only these two values.
func clientOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(trustapi.MetadataClient); len(v) > 0 && strings.TrimSpace(v[0]) == trustapi.ClientAgent {
		return trustapi.ClientAgent
	}
	return trustapi.ClientSpoke
}

// credentialsFrom reads cluster, bearer token and spoke version.
func credentialsFrom(ctx context.Context) (model.ClusterID, string, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	cluster := model.ClusterID(first(trustapi.MetadataClusterID))
	if cluster == "" {
		return "", "", "", fmt.Errorf("%w: no %q metadata", ca.ErrMissingCredentials, trustapi.MetadataClusterID)
	}
	scheme, token, ok := strings.Cut(first(trustapi.MetadataAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", "", "", fmt.Errorf("%w: authorization is not %q", ca.ErrMissingCredentials, "Bearer <token>")
	}
	return cluster, strings.TrimSpace(token), first(trustapi.MetadataSpokeVersion), nil
}
