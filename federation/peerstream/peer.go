package peerstream

// The stream engine: dialing, Hello, the reader and writer of each link.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/pki"
)

// Errors of the peer transport.
var (
	// ErrPeerNotConnected is returned by Peers.Send when there is no open
	// stream to the replica.
	ErrPeerNotConnected = errors.New("peerstream: peer not connected")
	// ErrPeerOverflow means a peer's send queue was full: the message was
	// dropped and the stream to that peer closed, so that the peer catches
	// up with snapshots when it reconnects.
	ErrPeerOverflow = errors.New("peerstream: peer send queue overflow")
	// ErrPeerIdentity means a certificate carries no replica identity, or
	// not the one expected.
	ErrPeerIdentity = errors.New("peerstream: peer identity")
	// ErrInvalidPeerOptions is returned by NewPeers for options it cannot
	// use.
	ErrInvalidPeerOptions = errors.New("peerstream: invalid peer options")
	// ErrPeersRunning is returned by a second call of Peers.Run.
	ErrPeersRunning = errors.New("peerstream: peers already running")
)

const (
	// MaxPeerFrameBytes bounds one frame on the wire. gRPC enforces it on
	// receive and send; Broadcast and Send refuse a larger message before
	// it is queued. A snapshot of a cluster with 100k endpoints is about
	// 7 MiB of protobuf (20 MiB as JSON was), so this leaves room while
	// capping what one peer can make another allocate.
	MaxPeerFrameBytes = 64 << 20

	// DefaultPeerTrustDomain is the SPIFFE trust domain of the replica IDs
	// that PeerCertificate issues (Istio's default trust domain).
	DefaultPeerTrustDomain = pki.DefaultTrustDomain

	// DefaultPeerCertValidity is how long a PeerCertificate is valid. The
	// certificate is issued when a replica starts and is not rotated while
	// it runs, so it must outlast the longest expected uptime; a replica
	// that runs longer must be restarted (or given certificates from
	// files that an operator rotates).
	DefaultPeerCertValidity = 365 * 24 * time.Hour

	// peerServiceName and peerSyncMethod name the hand-written service: a
	// single bidi-streaming method whose messages are
	// google.protobuf.BytesValue holding an encoded peerpb.PeerMessage
	// (encoded once per broadcast, whatever the number of peers).
	peerServiceName = "meshfed.federation.v1.Peer"
	peerSyncMethod  = "/" + peerServiceName + "/Sync"

	// peerFrameOverhead is what the BytesValue wrapping adds to the frame
	// (a tag and a varint length).
	peerFrameOverhead = 16
	// peerURIPrefix is the path of a replica's SPIFFE ID, before its name.
	peerURIPrefix = "/meshfed/replica/"
)

// PeerHandler receives what peers send. It is the boundary between the
// transport and the replicated state, which the transport does not know.
//
// Concurrency: Peers calls the handler from the goroutine of each peer's
// stream. For one stream, PeerHello comes first, then PeerMessage calls,
// one at a time in the order the peer sent. Calls for different peers run
// concurrently; and when a peer reconnects, a call from its old stream may
// still be running when PeerHello of the new one starts. A call must not
// block for long: while it runs nothing more is read from that peer, gRPC
// flow control then stalls the peer's sender, and a peer whose send queue
// fills up closes the stream. A handler may call Peers.Send and
// Peers.Broadcast, which never block.
type PeerHandler interface {
	// PeerHello is called when a stream to a peer opens, in either
	// direction, with its Hello (whose Digest says what it holds). It
	// returns the messages to send that peer before anything else
	// (catch-up snapshots). Everything broadcast after PeerHello is called
	// is sent after them, so a snapshot taken inside PeerHello is never
	// overtaken by an older delta.
	PeerHello(from federation.ReplicaID, hello *federation.Hello) []*federation.PeerMessage
	// PeerMessage delivers a validated message from a peer. It is never a
	// Hello.
	PeerMessage(from federation.ReplicaID, msg *federation.PeerMessage)
}

// PeerOptions configure Peers. Zero durations and sizes take the defaults
// given on each field.
type PeerOptions struct {
	// Self is this replica; it must match the identity in the certificates
	// of TLS and ClientTLS.
	Self federation.ReplicaID
	// ListenAddr is the address to serve peers on, such as ":7947" or
	// "127.0.0.1:0".
	ListenAddr string
	// TLS is the server side. It must require and verify client
	// certificates (tls.RequireAndVerifyClientCert); PeerTLS makes one.
	TLS *tls.Config
	// ClientTLS is the dialing side; PeerTLS makes one. Peers adds to it a
	// check that the server is the replica it meant to dial.
	ClientTLS *tls.Config
	// TrustDomain, when set, is the only SPIFFE trust domain accepted in
	// peer certificates. When empty any trust domain is accepted: the CA
	// pool of TLS and ClientTLS is then the trust boundary, which suffices
	// for a CA that signs only replica certificates.
	TrustDomain pki.TrustDomain
	// Handler receives hellos and messages. Required.
	Handler PeerHandler
	// LocalDigest returns this replica's digest for its Hello. It is
	// called from stream goroutines, concurrently, and must not block. Nil
	// sends an empty digest.
	LocalDigest func() federation.Digest
	// Log receives connection events and rejections.
	Log logr.Logger
	// Metrics, when set, registers the transport's metrics.
	Metrics prometheus.Registerer

	// SendQueue is how many frames may wait for each peer; default 1024.
	// Catch-up messages do not count. When the queue is full, the stream
	// is closed and the overflow counted: the peer reconnects and catches
	// up with snapshots, which is cheaper than buffering without bound for
	// a peer that cannot keep up.
	SendQueue int
	// HelloTimeout bounds the wait for the peer's Hello; default 10s. A
	// connection that sends nothing must not hold a stream open.
	HelloTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the wait between attempts to
	// dial a peer, doubling from min to max with jitter; defaults 100ms
	// and 5s. A restarted replica is found again within ReconnectMax,
	// well before gossip would declare it dead (5-14 s).
	ReconnectMin, ReconnectMax time.Duration
	// Keepalive is the interval of HTTP/2 pings on an idle connection and
	// the time to wait for their answer; default 5s. A peer that vanishes
	// without closing its connection (a partition, a frozen VM) is noticed
	// within about twice this, an early signal of failure.
	Keepalive time.Duration
}

func (o *PeerOptions) defaults() {
	if o.SendQueue <= 0 {
		o.SendQueue = 1024
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 100 * time.Millisecond
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = 5 * time.Second
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.Keepalive <= 0 {
		o.Keepalive = 5 * time.Second
	}
	if o.LocalDigest == nil {
		o.LocalDigest = func() federation.Digest { return federation.Digest{} }
	}
}

func (o *PeerOptions) validate() error {
	if err := o.Self.Validate(); err != nil {
		return fmt.Errorf("%w: Self: %w", ErrInvalidPeerOptions, err)
	}
	if o.ListenAddr == "" {
		return fmt.Errorf("%w: ListenAddr is empty", ErrInvalidPeerOptions)
	}
	if o.Handler == nil {
		return fmt.Errorf("%w: Handler is nil", ErrInvalidPeerOptions)
	}
	if o.TLS == nil || o.ClientTLS == nil {
		return fmt.Errorf("%w: TLS and ClientTLS are required (mutual TLS)", ErrInvalidPeerOptions)
	}
	if o.TLS.ClientAuth != tls.RequireAndVerifyClientCert || o.TLS.ClientCAs == nil {
		return fmt.Errorf("%w: TLS must require and verify client certificates against ClientCAs", ErrInvalidPeerOptions)
	}
	if len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil && o.TLS.GetConfigForClient == nil {
		return fmt.Errorf("%w: TLS has no certificate", ErrInvalidPeerOptions)
	}
	if len(o.ClientTLS.Certificates) == 0 && o.ClientTLS.GetClientCertificate == nil {
		return fmt.Errorf("%w: ClientTLS has no client certificate", ErrInvalidPeerOptions)
	}
	if o.ClientTLS.InsecureSkipVerify && o.ClientTLS.VerifyConnection == nil && o.ClientTLS.VerifyPeerCertificate == nil {
		return fmt.Errorf("%w: ClientTLS skips verification without verifying the server itself", ErrInvalidPeerOptions)
	}
	if o.TrustDomain != "" {
		if err := checkTrustDomain(o.TrustDomain); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidPeerOptions, err)
		}
	}
	return nil
}

// Peers is the replica-to-replica transport. Each pair of replicas shares
// exactly one stream, which carries data both ways: the replica whose ID
// sorts lower dials the other (SetPeers), and a replica refuses a stream
// from a peer it should have dialed itself. Every stream starts with a
// Hello each way: the dialer sends first, the server answers after
// checking it. Each side then sends the catch-up messages its handler
// returns from PeerHello, then what is broadcast.
//
// Identity: both sides present certificates from a shared CA, with the
// replica's SPIFFE ID, spiffe://<trust-domain>/meshfed/replica/<id>, as
// the only URI SAN (PeerCertificate). The server checks that the Hello
// names the replica of the client's certificate; the dialer checks, during
// the TLS handshake, that the server's certificate names the replica it
// meant to dial, and that its Hello does too. A peer cannot pose as
// another.
//
// Malformed frames (not JSON, or failing Validate) are counted, logged and
// dropped; the stream stays open, since gRPC's framing is intact and the
// next frame can be read. A dropped delta leaves a gap the handler's state
// notices when the next delta of that cluster does not apply, and it asks
// for a snapshot (Resync). A malformed or missing Hello closes the stream.
type Peers struct {
	opts    PeerOptions
	log     logr.Logger
	metrics *peerMetrics
	server  *grpc.Server

	// bound is closed when Run has bound its listener (addr set) or failed
	// to.
	bound chan struct{}
	addr  net.Addr

	// wg counts the dialers and the goroutines of each stream; Run waits
	// for them. Adds happen under mu while not closing, or inside a counted
	// goroutine or a gRPC handler (Stop waits for those).
	wg sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// running is set by Run; closing once Run is shutting down (no new
	// streams or dialers after that).
	running, closing bool
	// runCtx is Run's context, the parent of every dialer.
	runCtx context.Context
	// desired is the last SetPeers, without Self.
	desired map[federation.ReplicaID]string
	// dialers are the peers this replica dials, by ID.
	dialers map[federation.ReplicaID]*peerDialer
	// links are the open streams by peer, at most one per peer.
	links  map[federation.ReplicaID]*peerLink
	onDown []func(federation.ReplicaID)
}

// peerDialer keeps one outbound stream to a peer open.
type peerDialer struct {
	addr   string
	cancel context.CancelFunc
}

// peerLink is one open, authenticated stream to a peer.
type peerLink struct {
	id       federation.ReplicaID
	outbound bool
	// ctx ends when the stream is closed, with the reason as its cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	queue  chan peerFrame
}

func (l *peerLink) close(cause error) { l.cancel(cause) }

// Causes of a link closing that Peers decides itself.
var (
	errPeerReplaced = errors.New("replaced by a newer stream from the same peer")
	errPeerRemoved  = errors.New("peer removed by SetPeers")
)

// NewPeers creates the transport. It binds nothing until Run.
func NewPeers(opts PeerOptions) (*Peers, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	p := &Peers{
		opts:    opts,
		log:     opts.Log,
		metrics: newPeerMetrics(),
		bound:   make(chan struct{}),
		desired: map[federation.ReplicaID]string{},
		dialers: map[federation.ReplicaID]*peerDialer{},
		links:   map[federation.ReplicaID]*peerLink{},
	}
	if opts.Metrics != nil {
		if err := p.metrics.register(opts.Metrics); err != nil {
			return nil, fmt.Errorf("federation: peer metrics: %w", err)
		}
	}
	p.server = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(opts.TLS)),
		grpc.MaxRecvMsgSize(MaxPeerFrameBytes),
		grpc.MaxSendMsgSize(MaxPeerFrameBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: opts.Keepalive, Timeout: opts.Keepalive}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: opts.Keepalive / 2, PermitWithoutStream: true}),
		grpc.WaitForHandlers(true),
	)
	p.server.RegisterService(&peerServiceDesc, peerService{p})
	return p, nil
}

// peerServiceDesc is the hand-written descriptor of
//
//	service Peer { rpc Sync(stream google.protobuf.BytesValue) returns (stream google.protobuf.BytesValue); }
//
// in package meshfed.federation.v1. No generated code: the messages are
// JSON inside BytesValue.
var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: peerServiceName,
	HandlerType: (*peerSyncServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Sync",
		Handler:       func(srv any, stream grpc.ServerStream) error { return srv.(peerSyncServer).Sync(stream) },
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "meshfed/federation/v1/peer.proto",
}

type peerSyncServer interface {
	Sync(grpc.ServerStream) error
}

type peerService struct{ p *Peers }

func (s peerService) Sync(stream grpc.ServerStream) error { return s.p.accept(stream) }

// frameStream is what both ends of the stream have in common.
type frameStream interface {
	SendMsg(m any) error
	RecvMsg(m any) error
}

// Run serves inbound streams and keeps the outbound ones open until ctx
// ends. It returns nil when ctx ends, or the error that stopped it.
func (p *Peers) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return ErrPeersRunning
	}
	p.running = true
	p.mu.Unlock()

	lis, err := net.Listen("tcp", p.opts.ListenAddr)
	if err != nil {
		close(p.bound)
		return fmt.Errorf("federation: peer listener: %w", err)
	}
	p.addr = lis.Addr()
	close(p.bound)
	p.log.Info("serving peers", "addr", p.addr.String(), "self", p.opts.Self)

	p.mu.Lock()
	p.runCtx = ctx
	p.reconcileLocked()
	p.mu.Unlock()

	served := make(chan error, 1)
	go func() { served <- p.server.Serve(lis) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-served:
	}

	p.mu.Lock()
	p.closing = true
	for _, d := range p.dialers {
		d.cancel()
	}
	p.mu.Unlock()
	p.server.Stop() // closes every stream and waits for the handlers
	p.wg.Wait()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("federation: serving peers: %w", err)
	}
	return nil
}

// Addr returns the address Run listens on. It blocks until Run has bound
// it, and returns nil if Run could not.
func (p *Peers) Addr() net.Addr {
	<-p.bound
	return p.addr
}

// SetPeers sets the replicas this one should be connected to, by ID and
// peer address (from membership; Self is ignored). Of those, it dials the
// ones whose IDs sort above its own, retrying with backoff, and redials
// when an address changes; the others dial it. It closes the streams, in
// either direction, of replicas the previous call listed and this one does
// not. A stream from a replica never listed is accepted: membership views
// converge at different times.
func (p *Peers) SetPeers(peers map[federation.ReplicaID]string) {
	desired := make(map[federation.ReplicaID]string, len(peers))
	for id, addr := range peers {
		if id == p.opts.Self {
			continue
		}
		if err := id.Validate(); err != nil || addr == "" {
			p.log.Info("ignoring peer with invalid ID or no address", "peer", id, "addr", addr)
			continue
		}
		desired[id] = addr
	}
	p.mu.Lock()
	var drop []*peerLink
	for id := range p.desired {
		if _, ok := desired[id]; !ok && p.links[id] != nil {
			drop = append(drop, p.links[id])
		}
	}
	p.desired = desired
	p.reconcileLocked()
	p.mu.Unlock()
	for _, l := range drop {
		l.close(errPeerRemoved)
	}
}

// dials reports whether this replica dials peer id: the lower ID dials.
func (p *Peers) dials(id federation.ReplicaID) bool { return p.opts.Self < id }

// reconcileLocked starts and stops dialers to match desired. p.mu must be
// held.
func (p *Peers) reconcileLocked() {
	if p.runCtx == nil || p.closing {
		return
	}
	for id, d := range p.dialers {
		if addr, ok := p.desired[id]; !ok || addr != d.addr {
			d.cancel()
			delete(p.dialers, id)
		}
	}
	for id, addr := range p.desired {
		if !p.dials(id) || p.dialers[id] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(p.runCtx)
		p.dialers[id] = &peerDialer{addr: addr, cancel: cancel}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer cancel()
			p.dialLoop(ctx, id, addr)
		}()
	}
}

// Broadcast queues msg for every connected peer. It never blocks: a peer
// whose queue is full has its stream closed (and catches up when it
// reconnects). It returns an error only for a message that cannot be sent
// at all (ErrMalformedMessage), which it also logs.
func (p *Peers) Broadcast(msg *federation.PeerMessage) error {
	f, err := encodeOutbound(msg)
	if err != nil {
		p.log.Error(err, "not broadcasting malformed message")
		return err
	}
	p.mu.Lock()
	links := slices.Collect(maps.Values(p.links))
	p.mu.Unlock()
	for _, l := range links {
		_ = p.enqueue(l, f) // overflows are counted and logged
	}
	return nil
}

// Send queues msg for one peer. It never blocks. It fails with
// ErrPeerNotConnected when there is no stream to the peer, ErrPeerOverflow
// when the peer's queue is full (the stream is then closed), and
// ErrMalformedMessage for a message that cannot be sent.
func (p *Peers) Send(to federation.ReplicaID, msg *federation.PeerMessage) error {
	f, err := encodeOutbound(msg)
	if err != nil {
		return err
	}
	p.mu.Lock()
	l := p.links[to]
	p.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: %s", ErrPeerNotConnected, to)
	}
	return p.enqueue(l, f)
}

// encodeOutbound encodes a message of the handler's; the Hello is the
// transport's own.
func encodeOutbound(msg *federation.PeerMessage) (peerFrame, error) {
	if msg != nil && msg.Hello != nil {
		return peerFrame{}, fmt.Errorf("%w: federation.Hello is sent by the transport", federation.ErrMalformedMessage)
	}
	return encodePeerFrame(msg)
}

func (p *Peers) enqueue(l *peerLink, f peerFrame) error {
	if l.ctx.Err() != nil {
		return fmt.Errorf("%w: %s (stream closing)", ErrPeerNotConnected, l.id)
	}
	select {
	case l.queue <- f:
		return nil
	default:
	}
	p.metrics.overflows.Inc()
	err := fmt.Errorf("%w: %s, %d frames waiting", ErrPeerOverflow, l.id, cap(l.queue))
	p.log.Info("peer cannot keep up; closing its stream so it resyncs", "peer", l.id, "queue", cap(l.queue))
	l.close(err)
	return err
}

// Connected returns the peers with an open stream, sorted.
func (p *Peers) Connected() []federation.ReplicaID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.links))
}

// OnPeerDown registers fn to be called when the stream to a peer closes
// and no newer stream from that peer has replaced it: the peer died,
// restarted, was partitioned, fell behind, or was removed by SetPeers. It
// is an early signal of failure, seconds before gossip. fn runs on the
// stream's goroutine and must not block long; it is not called while Run
// shuts down.
func (p *Peers) OnPeerDown(fn func(federation.ReplicaID)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onDown = append(p.onDown, fn)
}

// accept serves one inbound stream.
func (p *Peers) accept(ss grpc.ServerStream) error {
	ctx := ss.Context()
	certID, err := p.streamIdentity(ctx)
	if err != nil {
		p.reject("", peerRejectIdentity, err)
		return status.Error(codes.Unauthenticated, err.Error())
	}
	hello, reason, err := p.recvHello(ctx, ss, nil)
	if err != nil {
		if reason != "" {
			p.reject(certID, reason, err)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		return err
	}
	if hello.Replica != certID {
		err := fmt.Errorf("%w: federation.Hello claims replica %q, certificate is of %q", ErrPeerIdentity, hello.Replica, certID)
		p.reject(certID, peerRejectIdentity, err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	if hello.Replica == p.opts.Self {
		err := fmt.Errorf("%w: peer claims to be this replica, %q", ErrPeerIdentity, p.opts.Self)
		p.reject(certID, peerRejectIdentity, err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	if p.dials(hello.Replica) {
		err := fmt.Errorf("replica %q dials %q, not the other way round", p.opts.Self, hello.Replica)
		p.reject(certID, peerRejectDirection, err)
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	p.metrics.received[federation.KindHello].Inc()
	if err := p.sendHello(ss); err != nil {
		return err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := p.newLink(hello.Replica, false, lctx, cancel)
	cause := p.serveLink(l, ss, hello)
	switch {
	case errors.Is(cause, ErrPeerOverflow):
		return status.Error(codes.ResourceExhausted, cause.Error())
	case errors.Is(cause, errPeerReplaced), errors.Is(cause, errPeerRemoved):
		return status.Error(codes.Aborted, cause.Error())
	}
	return nil
}

// dialLoop keeps a stream to peer id at addr open until ctx ends.
func (p *Peers) dialLoop(ctx context.Context, id federation.ReplicaID, addr string) {
	log := p.log.WithValues("peer", id, "addr", addr)
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(p.clientCreds(id)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxPeerFrameBytes), grpc.MaxCallSendMsgSize(MaxPeerFrameBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: p.opts.Keepalive, Timeout: p.opts.Keepalive, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: p.opts.ReconnectMin, Multiplier: 2, Jitter: 0.2, MaxDelay: p.opts.ReconnectMax},
			MinConnectTimeout: p.opts.HelloTimeout,
		}),
	)
	if err != nil {
		log.Error(err, "cannot dial peer")
		return
	}
	defer conn.Close()
	wait := p.opts.ReconnectMin
	for failures := 0; ; {
		start := time.Now()
		established, err := p.dialOnce(ctx, conn, id)
		if ctx.Err() != nil {
			return
		}
		if established && time.Since(start) >= p.opts.ReconnectMax {
			wait, failures = p.opts.ReconnectMin, 0
		}
		failures++
		if failures == 1 || failures%10 == 0 {
			log.Info("peer stream ended; redialing", "error", errString(err), "failures", failures)
		}
		t := time.NewTimer(peerJitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, p.opts.ReconnectMax)
	}
}

// dialOnce opens one stream to id and serves it until it ends. It reports
// whether the Hellos were exchanged.
func (p *Peers) dialOnce(ctx context.Context, conn *grpc.ClientConn, id federation.ReplicaID) (bool, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cs, err := conn.NewStream(lctx, &peerServiceDesc.Streams[0], peerSyncMethod)
	if err != nil {
		return false, err
	}
	if err := p.sendHello(cs); err != nil {
		return false, err
	}
	hello, reason, err := p.recvHello(lctx, cs, cancel)
	if err != nil {
		if reason != "" {
			p.reject(id, reason, err)
		}
		return false, err
	}
	if hello.Replica != id {
		err := fmt.Errorf("%w: dialed %q, its federation.Hello claims %q", ErrPeerIdentity, id, hello.Replica)
		p.reject(id, peerRejectIdentity, err)
		return false, err
	}
	p.metrics.received[federation.KindHello].Inc()
	l := p.newLink(id, true, lctx, cancel)
	return true, p.serveLink(l, cs, hello)
}

// clientCreds are ClientTLS plus a check, in the handshake, that the server
// is replica id.
func (p *Peers) clientCreds(id federation.ReplicaID) credentials.TransportCredentials {
	cfg := p.opts.ClientTLS.Clone()
	inner := cfg.VerifyConnection
	trustDomain := p.opts.TrustDomain
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if inner != nil {
			if err := inner(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: server presented no certificate", ErrPeerIdentity)
		}
		got, err := ReplicaFromCertificate(cs.PeerCertificates[0], trustDomain)
		if err != nil {
			return err
		}
		if got != id {
			return fmt.Errorf("%w: dialed replica %q, server is %q", ErrPeerIdentity, id, got)
		}
		return nil
	}
	return credentials.NewTLS(cfg)
}

// streamIdentity is the replica of the verified client certificate of an
// inbound stream.
func (p *Peers) streamIdentity(ctx context.Context) (federation.ReplicaID, error) {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return "", fmt.Errorf("%w: no peer information", ErrPeerIdentity)
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", fmt.Errorf("%w: no verified client certificate", ErrPeerIdentity)
	}
	return ReplicaFromCertificate(info.State.VerifiedChains[0][0], p.opts.TrustDomain)
}

func (p *Peers) sendHello(s frameStream) error {
	f, err := encodePeerFrame(&federation.PeerMessage{Hello: &federation.Hello{Replica: p.opts.Self, Digest: p.opts.LocalDigest(), Protocol: federation.PeerProtocol}})
	if err != nil {
		return fmt.Errorf("federation: encode hello: %w", err)
	}
	if err := s.SendMsg(&wrapperspb.BytesValue{Value: f.data}); err != nil {
		return err
	}
	p.metrics.sent[federation.KindHello].Inc()
	return nil
}

// recvHello waits up to HelloTimeout for the first frame and checks that it
// is a Hello of our protocol. A failure caused by the peer's frame comes
// with a rejection reason. On timeout it cancels the stream with cancel
// when given; a server handler instead returns, which ends the stream.
func (p *Peers) recvHello(ctx context.Context, s frameStream, cancel context.CancelCauseFunc) (*federation.Hello, string, error) {
	type result struct {
		hello  *federation.Hello
		reason string
		err    error
	}
	got := make(chan result, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var in wrapperspb.BytesValue
		if err := s.RecvMsg(&in); err != nil {
			got <- result{err: err}
			return
		}
		m, reason, err := decodePeerFrame(in.Value)
		switch {
		case err != nil:
			got <- result{reason: reason, err: err}
		case m.Hello == nil:
			got <- result{reason: peerRejectNoHello, err: fmt.Errorf("%w: first frame is a %s, not a hello", federation.ErrMalformedMessage, m.Kind())}
		case m.Hello.Protocol != federation.PeerProtocol:
			got <- result{reason: peerRejectProtocol, err: fmt.Errorf("peer speaks protocol %d, this replica %d", m.Hello.Protocol, federation.PeerProtocol)}
		default:
			got <- result{hello: m.Hello}
		}
	}()
	t := time.NewTimer(p.opts.HelloTimeout)
	defer t.Stop()
	select {
	case r := <-got:
		return r.hello, r.reason, r.err
	case <-t.C:
		err := fmt.Errorf("no hello within %v", p.opts.HelloTimeout)
		if cancel != nil {
			cancel(err)
		}
		return nil, peerRejectNoHello, err
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	}
}

func (p *Peers) newLink(id federation.ReplicaID, outbound bool, ctx context.Context, cancel context.CancelCauseFunc) *peerLink {
	return &peerLink{id: id, outbound: outbound, ctx: ctx, cancel: cancel, queue: make(chan peerFrame, p.opts.SendQueue)}
}

// serveLink runs an authenticated stream until it closes and returns why.
// It registers the link (replacing an older one of the same peer), asks
// the handler for catch-up messages, and runs a reader and a writer.
func (p *Peers) serveLink(l *peerLink, s frameStream, hello *federation.Hello) error {
	log := p.log.WithValues("peer", l.id, "outbound", l.outbound)
	if !p.addLink(l) {
		return errors.New("shutting down")
	}
	defer p.removeLink(l)
	log.Info("peer connected")

	// Registered first, so that anything broadcast from now on is queued
	// behind the catch-up messages and never lost in between.
	var first []peerFrame
	for _, m := range p.opts.Handler.PeerHello(l.id, hello) {
		f, err := encodeOutbound(m)
		if err != nil {
			log.Error(err, "dropping malformed catch-up message")
			continue
		}
		first = append(first, f)
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.readLoop(l, s)
	}()
	go func() {
		defer p.wg.Done()
		p.writeLoop(l, s, first)
	}()
	<-l.ctx.Done()
	cause := context.Cause(l.ctx)
	log.Info("peer disconnected", "reason", errString(cause))
	return cause
}

func (p *Peers) addLink(l *peerLink) bool {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return false
	}
	old := p.links[l.id]
	p.links[l.id] = l
	p.metrics.connected.Set(float64(len(p.links)))
	p.mu.Unlock()
	if old != nil {
		old.close(errPeerReplaced)
	}
	return true
}

func (p *Peers) removeLink(l *peerLink) {
	p.mu.Lock()
	current := p.links[l.id] == l
	if current {
		delete(p.links, l.id)
		p.metrics.connected.Set(float64(len(p.links)))
	}
	fns := slices.Clone(p.onDown)
	closing := p.closing
	p.mu.Unlock()
	if current && !closing {
		for _, fn := range fns {
			fn(l.id)
		}
	}
}

// readLoop delivers the peer's frames to the handler until the stream
// ends.
func (p *Peers) readLoop(l *peerLink, s frameStream) {
	for {
		var in wrapperspb.BytesValue
		if err := s.RecvMsg(&in); err != nil {
			l.close(fmt.Errorf("receive: %w", err))
			return
		}
		m, reason, err := decodePeerFrame(in.Value)
		if err != nil {
			p.reject(l.id, reason, err)
			continue
		}
		if m.Hello != nil {
			p.reject(l.id, peerRejectHelloAgain, fmt.Errorf("%w: hello after the first frame", federation.ErrMalformedMessage))
			continue
		}
		p.metrics.received[m.Kind()].Inc()
		if l.ctx.Err() != nil {
			return
		}
		p.opts.Handler.PeerMessage(l.id, m)
	}
}

// writeLoop sends the catch-up frames, then the queue, until the stream
// ends.
func (p *Peers) writeLoop(l *peerLink, s frameStream, first []peerFrame) {
	for _, f := range first {
		if !p.write(l, s, f) {
			return
		}
	}
	for {
		select {
		case <-l.ctx.Done():
			return
		case f := <-l.queue:
			if !p.write(l, s, f) {
				return
			}
		}
	}
}

func (p *Peers) write(l *peerLink, s frameStream, f peerFrame) bool {
	if l.ctx.Err() != nil {
		return false
	}
	if err := s.SendMsg(&wrapperspb.BytesValue{Value: f.data}); err != nil {
		l.close(fmt.Errorf("send: %w", err))
		return false
	}
	p.metrics.sent[f.kind].Inc()
	return true
}

func (p *Peers) reject(from federation.ReplicaID, reason string, err error) {
	p.metrics.rejected.WithLabelValues(reason).Inc()
	p.log.Info("peer message rejected", "peer", from, "reason", reason, "error", err.Error())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// peerJitter spreads d over [d/2, 3d/2) so replicas do not redial in
// lockstep.
func peerJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}

// peerMetrics are the transport's Prometheus metrics.
type peerMetrics struct {
	messages  *prometheus.CounterVec
	sent      map[string]prometheus.Counter
	received  map[string]prometheus.Counter
	rejected  *prometheus.CounterVec
	connected prometheus.Gauge
	overflows prometheus.Counter
}

func newPeerMetrics() *peerMetrics {
	m := &peerMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_messages_total",
			Help: "Peer stream frames sent, and received and accepted, by direction and kind.",
		}, []string{"direction", "kind"}),
		sent:     map[string]prometheus.Counter{},
		received: map[string]prometheus.Counter{},
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_messages_rejected_total",
			Help: "Peer stream frames and streams refused, by reason.",
		}, []string{"reason"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_federation_peers_connected",
			Help: "Peers with an open, authenticated stream.",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_send_overflows_total",
			Help: "Peer streams closed because the peer's send queue was full.",
		}),
	}
	// Every label value exists from the start, so that dashboards and
	// rate() see zeros rather than missing series.
	for _, k := range federation.PeerKinds() {
		m.sent[k] = m.messages.WithLabelValues("sent", k)
		m.received[k] = m.messages.WithLabelValues("received", k)
	}
	for _, r := range peerRejectReasons {
		m.rejected.WithLabelValues(r)
	}
	return m
}

func (m *peerMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.messages, m.rejected, m.connected, m.overflows} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
