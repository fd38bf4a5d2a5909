package ads

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// deltaConn is one Delta ADS stream.
type deltaConn struct {
	srv     *Server
	side    Stream // the handler's
	stream  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	node    *corev3.Node // of the first request that had one
	nonce   int64        // of the last answer sent
	out     chan cachev3.DeltaResponse
	watches map[string]*watch
}

// DeltaAggregatedResources serves one Delta ADS stream until it ends.
func (s *Server) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	side, err := s.open(st.Context(), s.ids.Add(1), true)
	if err != nil {
		return err
	}
	c := &deltaConn{srv: s, side: side, stream: st, node: &corev3.Node{},
		out: make(chan cachev3.DeltaResponse, responseBuffer), watches: map[string]*watch{}}
	defer c.close()
	return serve(s, st.Context(), st.Recv, c.out, c.send, c.request)
}

func (c *deltaConn) close() { closeWatches(c.watches, c.side) }

// request takes one request: every answer waiting is sent first, then the
// type's watch is replaced by one of the subscription as the request
// changes it.
func (c *deltaConn) request(req *discoveryv3.DeltaDiscoveryRequest) error {
	if req == nil {
		return errEmptyRequest
	}
	// The type's watch is closed before the waiting answers are sent,
	// so that none of it is answered between the two.
	w := c.watches[req.GetTypeUrl()]
	if w != nil {
		w.close()
	}
	if err := c.sendPending(); err != nil {
		return err
	}
	// Requests after the first may omit the node.
	req.Node = fillNode(&c.node, req.GetNode())
	if err := c.side.OnDeltaRequest(req); err != nil {
		return err
	}
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return errNoType
	}
	ackOf := ""
	if w == nil {
		w = &watch{typeURL: typeURL}
		w.sub.Subscription = streamv3.NewDeltaSubscription(req.GetResourceNamesSubscribe(),
			req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions(), true)
		c.watches[typeURL] = w
	} else {
		if plainACK(req, w.nonce) {
			ackOf = w.version
		}
		w.sub.UpdateResourceSubscriptions(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	return c.create(w, req, ackOf)
}

// plainACK reports whether req ACKs the answer of nonce and changes
// nothing of the subscription.
func plainACK(req *discoveryv3.DeltaDiscoveryRequest, nonce string) bool {
	return nonce != "" && req.GetResponseNonce() == nonce && req.GetErrorDetail() == nil &&
		len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0
}

// create opens a watch of req in the cache.
func (c *deltaConn) create(w *watch, req *discoveryv3.DeltaDiscoveryRequest, ackOf string) error {
	w.hintsFor(ackOf)
	w.sub.stream = c.side
	cancel, err := c.srv.cache.CreateDeltaWatch(req, w.sub, c.out)
	if err != nil {
		return err
	}
	w.created(cancel)
	return nil
}

// sendPending sends the answers waiting in the channel.
func (c *deltaConn) sendPending() error { return drain(c.out, c.send) }

// send sends one answer, then rewarms what it asks for.
func (c *deltaConn) send(r cachev3.DeltaResponse) error {
	out, err := r.GetDeltaDiscoveryResponse()
	if err != nil {
		return err
	}
	typeURL := r.GetDeltaRequest().GetTypeUrl()
	w := c.watches[typeURL]
	if w == nil {
		return noWatch(typeURL)
	}
	c.nonce++
	out.Nonce = strconv.FormatInt(c.nonce, 10)
	c.side.OnDeltaResponse(out)
	if err := c.stream.Send(out); err != nil {
		return err
	}
	w.answered(out.Nonce, out.GetSystemVersionInfo(), r.GetNextVersionMap())
	return c.rewarm(r)
}

// rewarm is sotwConn.rewarm for a Delta stream. The new watch asks as an
// ACK of the last answer would, so that a cache treats it as a later
// request of the stream (not its first).
func (c *deltaConn) rewarm(r cachev3.DeltaResponse) error {
	w, reopen, err := rewarmOf(r, func(typeURL string) *watch { return c.watches[typeURL] }, c.sendPending)
	if !reopen || err != nil {
		return err
	}
	return c.create(w, &discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: w.typeURL, ResponseNonce: w.nonce}, "")
}
