package peerstream

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/federation"
)

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
	closing := p.closing
	p.mu.Unlock()
	if current && !closing && p.opts.OnPeerDown != nil {
		p.opts.OnPeerDown(l.id)
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
