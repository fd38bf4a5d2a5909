package peerstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/meshfed/meshfed/federation"
)

// peerDialer keeps one outbound stream to a peer open.
type peerDialer struct {
	addr   string
	cancel context.CancelFunc
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
		start := p.opts.Clock.Now()
		established, err := p.dialOnce(ctx, conn, id)
		if ctx.Err() != nil {
			return
		}
		if established && p.opts.Clock.Since(start) >= p.opts.ReconnectMax {
			wait, failures = p.opts.ReconnectMin, 0
		}
		failures++
		if failures == 1 || failures%10 == 0 {
			log.Info("peer stream ended; redialing", "error", errString(err), "failures", failures)
		}
		t := p.opts.Clock.NewTimer(peerJitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
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

// peerJitter spreads d over [d/2, 3d/2) so replicas do not redial in
// lockstep.
func peerJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}
