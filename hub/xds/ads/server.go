package ads

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server serves ADS, State of the World and Delta, from one cache. It
// implements discoveryv3.AggregatedDiscoveryServiceServer; register it on
// any number of gRPC servers. Stream IDs are unique across both protocols.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	ctx     context.Context
	cache   cachev3.ConfigWatcher
	handler Handler
	ids     atomic.Int64 // the last stream ID given
}

// Handler opens the caller's side of each stream. Open may be called
// concurrently, for different streams.
type Handler interface {
	// Open is called when a stream opens, on the stream's goroutine,
	// with the stream's context (it ends with the stream; it carries the
	// peer and the metadata) and an ID unique across both protocols. An
	// error ends the stream at once, with nothing to close.
	Open(ctx context.Context, id int64, delta bool) (Stream, error)
}

// Stream is the caller's side of one stream. Its methods are called only
// from the stream's goroutine, one at a time: what they keep of the
// stream needs no lock against the stream itself. A SotW stream calls
// OnRequest and OnResponse; a Delta stream OnDeltaRequest and
// OnDeltaResponse.
type Stream interface {
	// OnRequest is called with each request, its node filled in with
	// the stream's first (the same pointer) when it carries none, before
	// its watch is created. An error ends the stream.
	OnRequest(*discoveryv3.DiscoveryRequest) error
	// OnResponse is called just before an answer is sent.
	OnResponse(*discoveryv3.DiscoveryResponse)
	// OnDeltaRequest is OnRequest for a Delta request.
	OnDeltaRequest(*discoveryv3.DeltaDiscoveryRequest) error
	// OnDeltaResponse is OnResponse for a Delta answer.
	OnDeltaResponse(*discoveryv3.DeltaDiscoveryResponse)
	// Closed is called once, when the stream has ended.
	Closed()
}

// NewServer returns a server of cache whose streams end when ctx does.
// handler, which may be nil, opens the caller's side of each stream.
func NewServer(ctx context.Context, cache cachev3.ConfigWatcher, handler Handler) *Server {
	return &Server{ctx: ctx, cache: cache, handler: handler}
}

// open opens the handler's side of a stream; nopStream without handler.
func (s *Server) open(ctx context.Context, id int64, delta bool) (Stream, error) {
	if s.handler == nil {
		return nopStream{}, nil
	}
	return s.handler.Open(ctx, id, delta)
}

// nopStream is the side of a stream of a server without handler.
type nopStream struct{}

func (nopStream) OnRequest(*discoveryv3.DiscoveryRequest) error           { return nil }
func (nopStream) OnResponse(*discoveryv3.DiscoveryResponse)               {}
func (nopStream) OnDeltaRequest(*discoveryv3.DeltaDiscoveryRequest) error { return nil }
func (nopStream) OnDeltaResponse(*discoveryv3.DeltaDiscoveryResponse)     {}
func (nopStream) Closed()                                                 {}

// responseBuffer is the capacity of a stream's answer channel. A cache
// answers a watch once and the stream holds one watch per type, so a
// handful of types never fill it; a rewarm's watch can add one more per
// type for a moment.
const responseBuffer = 32

// watch is a stream's state for one type URL, owned by the stream's
// goroutine.
type watch struct {
	typeURL string
	sub     Subscription
	cancel  func() // of the watch last created in the cache
	// open: the cache may still answer the watch last created (no
	// answer of it was sent, it was not cancelled).
	open bool
	// awaiting: an answer was sent since the last request was taken;
	// the stream's next request of the type ACKs or NACKs it.
	awaiting bool
	nonce    string // of the last answer sent (SotW: since the last request)
	version  string // of the last answer sent
	// outdated are names to be sent again (Rewarming); hinted says the
	// open watch was created with them, so that its answer sends them.
	outdated map[string]struct{}
	hinted   bool
}

// close cancels the watch last created.
func (w *watch) close() {
	if w.cancel != nil {
		w.cancel()
	}
	w.open = false
}

// created records a watch just created in the cache.
func (w *watch) created(cancel func()) {
	w.cancel, w.open, w.awaiting = cancel, true, false
}

// hintsFor sets the hints of the watch about to be created; ackOf is the
// request's AckOf, if it is a plain ACK.
func (w *watch) hintsFor(ackOf string) {
	w.hinted = len(w.outdated) > 0
	if w.hinted {
		ackOf = ""
	}
	w.sub.hints = Hints{AckOf: ackOf, Outdated: w.outdated}
}

// answered records that an answer of nonce and version went out, with
// the stream's known versions after it.
func (w *watch) answered(nonce, version string, known map[string]string) {
	w.sub.SetReturnedResources(known)
	w.nonce, w.version = nonce, version
	w.open, w.awaiting = false, true
	if w.hinted {
		// The answer of a watch created with outdated names sent them.
		w.outdated, w.hinted = nil, false
	}
}

// outdate marks names, those the stream knows, to be sent again.
func (w *watch) outdate(names []string) {
	known := w.sub.ReturnedResources()
	for _, n := range names {
		if _, ok := known[n]; !ok {
			continue
		}
		if w.outdated == nil {
			w.outdated = map[string]struct{}{}
		}
		w.outdated[n] = struct{}{}
	}
}

// rewarm marks names to be sent again after an answer that asked for it
// (Rewarming), and reports whether the type's watch is to be opened again
// now, with them as its hints: it was open, and closed here (a cache may
// change an open Delta watch's known versions in place, so they are read
// once it is closed), and no answer of it was waiting in the channel
// (sendPending sends those). Otherwise the next request opens it.
func (w *watch) rewarm(names []string, sendPending func() error) (bool, error) {
	reopen := w.open
	w.close()
	if err := sendPending(); err != nil {
		return false, err
	}
	w.outdate(names)
	return reopen && !w.awaiting, nil
}

// closeWatches cancels every watch of a stream that ended, then closes the
// handler's side of it.
func closeWatches[W interface{ close() }](ws map[string]W, side Stream) {
	for _, w := range ws {
		w.close()
	}
	side.Closed()
}

// drain hands each answer waiting in out to take, until none is left.
func drain[Resp any](out <-chan Resp, take func(Resp) error) error {
	for {
		select {
		case r := <-out:
			if err := take(r); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// rewarmOf returns the watch of a stream that r, just sent, asks to send
// its Rewarms again (see Rewarming), and whether it is to be opened again
// now (see watch.rewarm); watchOf finds a watch of the stream by type.
func rewarmOf(r any, watchOf func(typeURL string) *watch, sendPending func() error) (*watch, bool, error) {
	rw, ok := r.(Rewarming)
	if !ok {
		return nil, false, nil
	}
	typeURL, names := rw.Rewarms()
	w := watchOf(typeURL)
	if w == nil || len(names) == 0 {
		return nil, false, nil
	}
	reopen, err := w.rewarm(names, sendPending)
	return w, reopen, err
}

// fillNode returns the node of a request: its own, which becomes the
// stream's (*node), or, when it carries none, the stream's.
func fillNode(node **corev3.Node, carried *corev3.Node) *corev3.Node {
	if carried != nil {
		*node = carried
	}
	return *node
}

// pump reads a stream's requests into a channel, which is closed when the
// stream or the server ends.
func pump[T any](srv, stream context.Context, recv func() (*T, error)) <-chan *T {
	ch := make(chan *T)
	go func() {
		defer close(ch)
		for {
			req, err := recv()
			if err != nil {
				return
			}
			select {
			case ch <- req:
			case <-stream.Done():
				return
			case <-srv.Done():
				return
			}
		}
	}()
	return ch
}

// serve runs a stream's loop until the stream or the server ends: the
// answers from out are sent, the requests read by recv taken, one at a
// time on the stream's goroutine.
func serve[Req, Resp any](srv *Server, stream context.Context, recv func() (*Req, error), out <-chan Resp,
	send func(Resp) error, take func(*Req) error) error {
	reqs := pump(srv.ctx, stream, recv)
	for {
		select {
		case <-srv.ctx.Done():
			return nil
		case r := <-out:
			if err := send(r); err != nil {
				return sendError(err)
			}
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			if err := take(req); err != nil {
				return err
			}
		}
	}
}

// errEmptyRequest and errNoType end a stream whose request is unusable.
var (
	errEmptyRequest = status.Error(codes.Unavailable, "empty request")
	errNoType       = status.Error(codes.InvalidArgument, "type URL is required for ADS")
)

// sendError is the status of a response that could not be sent.
func sendError(err error) error {
	if _, ok := status.FromError(err); ok && err != nil {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// errNoWatch is an answer of a type the stream holds no watch of.
var errNoWatch = errors.New("ads: an answer of a type the stream does not watch")

func noWatch(typeURL string) error { return fmt.Errorf("%w: %s", errNoWatch, typeURL) }
