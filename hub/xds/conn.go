package xds

import (
	"context"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// conn is the hub's side of one ADS stream (ads.Stream): made when the
// stream opens, dropped when it closes, and called only from the stream's
// goroutine, so what it holds needs no lock. It holds everything the hub
// keeps of the stream: the caller's credential and proven identity, the
// node it was admitted with, its attachment to a proxy group (and Envoy
// sidecar), its NACKs in a row, and its status record. Nothing else is
// keyed by stream: the group cache and the status tracker only index
// what conns attach to them, for their readers.
type conn struct {
	s    *Server
	ctx  context.Context // the stream's; ends with it, carries its metadata
	auth streamAuth
	// node is the one the stream was last admitted with (the stream
	// server hands a request without one the stream's first).
	node     *corev3.Node
	attached attachment // valid once a request was admitted
	// eds is the load-assignment cache of the attached group, once a
	// watch of the stream found it (groupCache.pick).
	eds    *versioned
	nacks  nackRuns
	status *xdsstatus.Stream
}

var _ ads.Handler = (*Server)(nil)

// Open opens the hub's side of a stream (ads.Handler): a stream of the
// authenticated port without usable credentials is refused at once (no
// node is needed to know that); any other is counted and tracked.
func (s *Server) Open(ctx context.Context, id int64, delta bool) (ads.Stream, error) {
	auth, err := s.authn.opened(ctx)
	if err != nil {
		return nil, err
	}
	s.metrics.proxies.Inc()
	return &conn{s: s, ctx: ctx, auth: auth, nacks: nackRuns{}, status: s.status.Open(delta, id)}, nil
}

// OnRequest takes a SotW request: refused (the stream ends) unless its
// node is admitted; recorded; a NACK held back (nackBackoff).
func (c *conn) OnRequest(req *discoveryv3.DiscoveryRequest) error {
	return c.request(req.GetNode(), req.GetTypeUrl(), req.GetErrorDetail(), func() { c.status.OnRequest(req) })
}

// OnDeltaRequest is OnRequest for a Delta request.
func (c *conn) OnDeltaRequest(req *discoveryv3.DeltaDiscoveryRequest) error {
	return c.request(req.GetNode(), req.GetTypeUrl(), req.GetErrorDetail(), func() { c.status.OnDeltaRequest(req) })
}

// request takes a request of node for typeURL, NACKing with nack if not
// nil, that record records in the stream's status.
func (c *conn) request(node *corev3.Node, typeURL string, nack *status.Status, record func()) error {
	if err := c.admit(node); err != nil {
		return err
	}
	record()
	c.nacked(node, typeURL, nack)
	return nil
}

// OnResponse records a SotW answer about to be sent.
func (c *conn) OnResponse(resp *discoveryv3.DiscoveryResponse) { c.status.OnResponse(resp) }

// OnDeltaResponse records a Delta answer about to be sent.
func (c *conn) OnDeltaResponse(resp *discoveryv3.DeltaDiscoveryResponse) {
	c.status.OnDeltaResponse(resp)
}

// Closed frees what the stream held.
func (c *conn) Closed() {
	c.s.metrics.proxies.Dec()
	c.status.Close()
	c.s.cache.detach(c.attached)
}

// admit checks the node of a request (its size, its cluster, that the
// stream's caller may speak for it) and attaches the stream to the node's
// group, reading the node's metadata once; the caches route the stream's
// watches by the attachment (ads.StreamOf), without reading it again. The node the stream was last admitted with passes at once (the
// stream server hands every request without a node the stream's first,
// the same pointer), so that an ACK costs no metadata parsing.
func (c *conn) admit(node *corev3.Node) error {
	if node == c.node && c.node != nil {
		return nil
	}
	md := xdsnode.MetadataOf(node.GetMetadata())
	if err := c.s.requestChecked(node, md); err != nil {
		return err
	}
	if err := c.s.authn.request(c.ctx, &c.auth, node); err != nil {
		return err
	}
	if c.auth.caller != nil {
		c.status.SetIdentity(c.auth.caller.Identity())
	}
	if at := c.s.cache.attach(c.attached, node, md); !at.same(c.attached) {
		c.attached, c.eds = at, nil
	}
	c.node = node
	return nil
}

// nacked counts and logs a NACK, and holds back the stream's answer to
// it (nackBackoff); an ACK ends the type's run of NACKs. Only the first
// NACK in a row is logged at the default level: a proxy stuck on a bad
// config would otherwise flood the log.
func (c *conn) nacked(node *corev3.Node, typeURL string, nack *status.Status) {
	if nack != nil {
		c.s.metrics.nacks.WithLabelValues(xdsstatus.TypeLabel(typeURL)).Inc()
	}
	d := c.s.nacks.wait(c.ctx.Done(), c.nacks, typeURL, nack != nil)
	if nack != nil {
		c.s.logNACK(node.GetId(), typeURL, nack.GetMessage(), d)
	}
}

// logNACK logs a NACK that was held back for d, cut short (clip). The
// first of a row (d is the initial delay) is logged at info level unless
// more than nackLogRate a second arrive; the rest, and the ones after the
// first of a row, at debug level.
func (s *Server) logNACK(node, typeURL, nackMsg string, d time.Duration) {
	node, nackMsg = xdsstatus.Clip(node, maxLoggedDetailBytes), xdsstatus.Clip(nackMsg, maxLoggedDetailBytes)
	switch {
	case d == s.nacks.policy.Initial && s.nackLog.AllowN(s.clk.Now(), 1):
		s.opts.Log.Info("proxy rejected config", "node", node, "type", typeURL, "error", nackMsg)
	case d == s.nacks.policy.Initial:
		// Many streams NACKing at once (a bad config, or a client
		// opening streams to fill the log): the rest at debug level.
		s.metrics.nackLogs.Inc()
		s.opts.Log.V(1).Info("proxy rejected config", "node", node, "type", typeURL, "error", nackMsg)
	default:
		s.opts.Log.V(1).Info("proxy rejected config again", "node", node, "type", typeURL, "error", nackMsg, "heldBack", d)
	}
}
