package ads

import (
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// Hints is what the server knows of a watch's stream beyond its
// subscription. A cache may ignore them and answer as go-control-plane's
// caches do; reading them only saves work or sends again what must be.
type Hints struct {
	// AckOf is, for a request that ACKs the stream's last answer of the
	// type and changes nothing (no new names, no error, nothing outdated
	// since), the version of that answer (its system version); else "".
	// The subscription's known versions are then exactly what that
	// answer left: a cache still at that version has nothing to send.
	AckOf string
	// Outdated names resources the stream knows, in its version, that
	// are to be sent again anyway (see Rewarming). A cache answers at
	// once when one of them exists, and sends it in other bytes of the
	// same meaning if the stream holds its current version.
	Outdated map[string]struct{}
}

// HintsOf returns the hints of sub: those the server put on it, or none
// for a subscription of another origin.
func HintsOf(sub cachev3.Subscription) Hints {
	if s, ok := sub.(Subscription); ok {
		return s.hints
	}
	return Hints{}
}

// Subscription is what the server hands a cache with each watch:
// go-control-plane's subscription of the stream's type, with the hints.
// A cache is handed a copy, as go-control-plane's stream server hands it:
// the stream records its answers in its own while the cache reads the
// copy. Only the known versions of a Delta subscription are one map in
// both, which a cache may update in place while the watch is open.
type Subscription struct {
	streamv3.Subscription
	hints  Hints
	stream Stream
}

// StreamOf returns the handler's side of the stream that holds sub (what
// Handler.Open returned), so that a cache can read what the caller keeps
// of the stream instead of the request's node again; nil for a
// subscription of another origin. A cache's watch calls are made on the
// stream's goroutine, so reading it there needs no lock.
func StreamOf(sub cachev3.Subscription) Stream {
	if s, ok := sub.(Subscription); ok {
		return s.stream
	}
	return nil
}

var _ cachev3.Subscription = Subscription{}

// Rewarming is implemented by an answer that updates resources that
// resources of another type depend on: once it is sent, Rewarms's names
// of typeURL, those the stream knows, are sent again on the stream.
type Rewarming interface {
	Rewarms() (typeURL string, names []string)
}
