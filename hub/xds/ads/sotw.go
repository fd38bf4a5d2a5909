package ads

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// sotwConn is one State of the World ADS stream.
type sotwConn struct {
	srv     *Server
	side    Stream // the handler's
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	node    *corev3.Node // of the first request that had one
	nonce   int64        // of the last answer sent
	out     chan cachev3.Response
	watches map[string]*sotwWatch
}

// sotwWatch is a SotW stream's state for one type.
type sotwWatch struct {
	*watch
	req *discoveryv3.DiscoveryRequest // that created the open watch
}

// StreamAggregatedResources serves one SotW ADS stream until it ends.
func (s *Server) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	side, err := s.open(st.Context(), s.ids.Add(1), false)
	if err != nil {
		return err
	}
	c := &sotwConn{srv: s, side: side, stream: st, node: &corev3.Node{},
		out: make(chan cachev3.Response, responseBuffer), watches: map[string]*sotwWatch{}}
	defer c.close()
	return serve(s, st.Context(), st.Recv, c.out, func(r cachev3.Response) error { return c.send(r, "") }, c.request)
}

func (c *sotwConn) close() { closeWatches(c.watches, c.side) }

// request takes one request: a stale one (its nonce is not that of the
// last answer of its type) is ignored; else the type's open watch is
// replaced by one of the request, after the unsent answers of other types
// are sent and those of its own type dropped (the new watch answers anew).
func (c *sotwConn) request(req *discoveryv3.DiscoveryRequest) error {
	if req == nil {
		return errEmptyRequest
	}
	req.Node = fillNode(&c.node, req.GetNode())
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return errNoType
	}
	if err := c.side.OnRequest(req); err != nil {
		return err
	}
	w := c.watches[typeURL]
	if w == nil {
		w = &sotwWatch{watch: &watch{typeURL: typeURL}}
		w.sub.Subscription = streamv3.NewSotwSubscription(req.GetResourceNames(), true)
		c.watches[typeURL] = w
	} else {
		if w.nonce != "" && req.GetResponseNonce() != w.nonce {
			return nil // stale: an answer it has not seen is on its way
		}
		w.close()
		if err := c.sendPending(typeURL); err != nil {
			return err
		}
		w.sub.SetResourceSubscription(req.GetResourceNames())
	}
	w.nonce = ""
	return c.create(w, req)
}

// create opens a watch of req in the cache.
func (c *sotwConn) create(w *sotwWatch, req *discoveryv3.DiscoveryRequest) error {
	w.hintsFor("")
	w.sub.stream = c.side
	w.req = req
	cancel, err := c.srv.cache.CreateWatch(req, w.sub, c.out)
	if err != nil {
		return err
	}
	w.created(cancel)
	return nil
}

// sendPending sends the answers waiting in the channel, but drops those of
// type drop ("" drops none).
func (c *sotwConn) sendPending(drop string) error {
	return drain(c.out, func(r cachev3.Response) error {
		if drop != "" && r.GetRequest().GetTypeUrl() == drop {
			return nil
		}
		return c.send(r, drop)
	})
}

// send sends one answer, then rewarms what it asks for; drop is the type
// whose unsent answers are being dropped, if any.
func (c *sotwConn) send(r cachev3.Response, drop string) error {
	out, err := r.GetDiscoveryResponse()
	if err != nil {
		return err
	}
	typeURL := r.GetRequest().GetTypeUrl()
	w := c.watches[typeURL]
	if w == nil {
		return noWatch(typeURL)
	}
	c.nonce++
	out.Nonce = strconv.FormatInt(c.nonce, 10)
	w.answered(out.Nonce, out.GetVersionInfo(), r.GetReturnedResources())
	c.side.OnResponse(out)
	if err := c.stream.Send(out); err != nil {
		return err
	}
	return c.rewarm(r, drop)
}

// rewarm sends again, after r, what r's Rewarms name (see Rewarming): if
// the type's watch is open, it is replaced by one whose answer sends them
// now; else the next request of the type, which ACKs an answer on its
// way, opens that watch.
func (c *sotwConn) rewarm(r cachev3.Response, drop string) error {
	var req *discoveryv3.DiscoveryRequest
	w, reopen, err := rewarmOf(r, func(typeURL string) *watch {
		if sw := c.watches[typeURL]; sw != nil {
			req = sw.req
			return sw.watch
		}
		return nil
	}, func() error { return c.sendPending(drop) })
	if !reopen || err != nil {
		return err
	}
	return c.create(&sotwWatch{watch: w, req: req}, req)
}
