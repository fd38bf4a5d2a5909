package peerstream

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/federation"
)

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
	t := p.opts.Clock.NewTimer(p.opts.HelloTimeout)
	defer t.Stop()
	select {
	case r := <-got:
		return r.hello, r.reason, r.err
	case <-t.C():
		err := fmt.Errorf("no hello within %v", p.opts.HelloTimeout)
		if cancel != nil {
			cancel(err)
		}
		return nil, peerRejectNoHello, err
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	}
}
