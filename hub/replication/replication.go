package replication

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/gossip"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/hub/store"
)

// Options configure a Replicator.
type Options struct {
	Self federation.ReplicaID

	// GossipAddr is memberlist's bind address; Join lists seeds.
	GossipAddr, GossipAdvertiseAddr string
	Join                            []string
	// GossipKey encrypts gossip; nil leaves it in plaintext.
	GossipKey []byte

	// PeerAddr is the peer gRPC listen address, PeerAdvertiseAddr the
	// address other replicas dial (default PeerAddr).
	PeerAddr, PeerAdvertiseAddr string
	ServerTLS, ClientTLS        *tls.Config

	// Version is this replica's build version, published to the others
	// over gossip (and shown per member in Federationz).
	Version string

	// PeerConnectGrace is how long a gossip member may stay without a peer
	// stream before it is set aside as suspect. Only one side of a pair
	// dials, so a replica that joins after a peer died never sees that
	// peer's stream break, and would otherwise count it as an owner until
	// gossip declares it dead (seconds). Default 1s: a stream comes up in
	// milliseconds.
	PeerConnectGrace time.Duration

	Log     logr.Logger
	Metrics prometheus.Registerer
	Clock   clock.WithTicker
}

// Deps are what the Replicator replicates, built before it: the store of
// cluster state, the trust bundle, the fleet status (nil: not replicated)
// and the ownership it keeps current.
type Deps struct {
	Store     *store.Store
	Trust     *Trust
	Proxies   ProxyStatusSync
	Ownership *Ownership
}

// ProxyStatusSync is the proxy-status component as the Replicator sees it:
// opaque batches of records (encoded by their owner), this replica's going
// out, the others' coming in. Implementations must be safe for concurrent
// use and must not block.
type ProxyStatusSync interface {
	// Full returns every local record, for a peer that (re)connects.
	Full() []byte
	// TakeChanges takes the local changes since the last call, if any,
	// and returns the encoder of their batch, called only when a peer is
	// connected (one that connects later is sent Full).
	TakeChanges() (encode func() ([]byte, error), ok bool)
	// WaitChanged blocks until TakeChanges has something (coalesced);
	// false when ctx ends first.
	WaitChanged(ctx context.Context) bool
	// Apply merges a batch from replica from.
	Apply(from federation.ReplicaID, batch []byte) error
	// DropReplica forgets every record of a replica that left.
	DropReplica(id federation.ReplicaID)
}

// Replicator connects this hub replica to the others. It is the I/O shell
// around the pure cores of package federation: gossip membership, the
// peer stream and its mux, and one small replicator per kind of state
// registered on the mux (cluster state, trust bundle, fleet status), plus
// the members view that keeps ownership current.
type Replicator struct {
	opts       Options
	peers      *peerstream.Peers
	membership *gossip.Membership
	members    *members
	clusters   *clusters
	trust      *Trust
	fleet      *fleet // nil when proxy status is not replicated
	m          *metrics
}

// New builds the Replicator of deps. Nothing runs until Run.
func New(opts Options, deps Deps) (*Replicator, error) {
	if deps.Store == nil || deps.Trust == nil || deps.Ownership == nil {
		return nil, fmt.Errorf("replication: a store, a trust bundle and an ownership are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PeerAdvertiseAddr == "" {
		opts.PeerAdvertiseAddr = opts.PeerAddr
	}
	if opts.PeerConnectGrace == 0 {
		opts.PeerConnectGrace = time.Second
	}
	r := &Replicator{opts: opts, trust: deps.Trust, m: newMetrics(opts.Metrics)}
	mux := peerstream.NewMux()
	var err error
	r.peers, err = peerstream.NewPeers(peerstream.PeerOptions{
		Self: opts.Self, ListenAddr: opts.PeerAddr,
		TLS: opts.ServerTLS, ClientTLS: opts.ClientTLS,
		Handler: mux, LocalDigest: deps.Store.Digest,
		// members is made below, once there are peers to give it; a
		// stream goes down only after Run.
		OnPeerDown: func(id federation.ReplicaID) { r.members.peerDown(id) },
		Log:        opts.Log.WithName("peers"), Metrics: opts.Metrics, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r.clusters = &clusters{self: opts.Self, store: deps.Store, peers: r.peers, m: r.m, log: opts.Log, clock: opts.Clock}
	r.members = &members{self: opts.Self, own: deps.Ownership, store: deps.Store, peers: r.peers, m: r.m, log: opts.Log,
		grace: opts.PeerConnectGrace, clock: opts.Clock, unconnected: map[federation.ReplicaID]time.Time{}, recheck: make(chan struct{}, 1)}
	deps.Trust.peers, deps.Trust.m = r.peers, r.m
	handlers := []struct {
		h     peerstream.KindHandler
		kinds []string
	}{
		{r.members, nil}, // Hello only: a suspect that connects is taken back
		{r.clusters, []string{federation.KindSnapshot, federation.KindDelta, federation.KindResync, federation.KindSuperseded}},
		{deps.Trust, []string{federation.KindTrust}},
	}
	if deps.Proxies != nil {
		r.fleet = &fleet{proxies: deps.Proxies, peers: r.peers, m: r.m, log: opts.Log, clock: opts.Clock}
		r.members.onDepart = r.fleet.dropDeparted
		handlers = append(handlers, struct {
			h     peerstream.KindHandler
			kinds []string
		}{r.fleet, []string{federation.KindProxyStatus}})
	}
	for _, h := range handlers {
		if err := mux.Handle(h.h, h.kinds...); err != nil {
			return nil, fmt.Errorf("replication: %w", err)
		}
	}
	r.registerOwned(opts.Metrics, deps.Store, deps.Ownership)
	r.membership, err = gossip.NewMembership(gossip.MembershipOptions{
		ReplicaID: opts.Self, BindAddr: opts.GossipAddr, AdvertiseAddr: opts.GossipAdvertiseAddr,
		Join: opts.Join, Key: opts.GossipKey, PeerAddr: opts.PeerAdvertiseAddr, Version: opts.Version,
		LocalState: deps.Store.Digest, MergeState: r.clusters.mergeDigest,
		Clock: opts.Clock, Log: opts.Log.WithName("gossip"), Metrics: opts.Metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r.members.membership = r.membership
	return r, nil
}

// Run runs membership, the peer transport and each replicator until ctx
// ends; then it leaves the gossip gracefully so the others take over at
// once.
func (r *Replicator) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.peers.Run(ctx) })
	g.Go(func() error { return r.membership.Run(ctx) })
	g.Go(func() error { r.clusters.run(ctx); return nil })
	g.Go(func() error { r.trust.run(ctx); return nil })
	if r.fleet != nil {
		g.Go(func() error { r.fleet.run(ctx); return nil })
	}
	g.Go(func() error { r.members.runConnectCheck(ctx); return nil })
	g.Go(func() error { r.members.run(ctx); return nil })
	return g.Wait()
}
