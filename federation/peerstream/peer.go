package peerstream

// The stream engine: dialing, Hello, the reader and writer of each link.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

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
// Malformed frames (not protobuf, or failing Validate) are counted, logged and
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
	links map[federation.ReplicaID]*peerLink
}

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
// at all (ErrMalformedMessage), which it also logs. With no peer
// connected it encodes nothing and returns nil: a lone replica pays nothing
// per change (a peer that connects later catches up from its Hello).
func (p *Peers) Broadcast(msg *federation.PeerMessage) error {
	p.mu.Lock()
	links := slices.Collect(maps.Values(p.links))
	p.mu.Unlock()
	if len(links) == 0 {
		return nil
	}
	f, err := encodeOutbound(msg)
	if err != nil {
		p.log.Error(err, "not broadcasting malformed message")
		return err
	}
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

// Connected returns the peers with an open stream, sorted.
func (p *Peers) Connected() []federation.ReplicaID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.links))
}
