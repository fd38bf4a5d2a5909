package xds

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Backoff bounds the delay before answering a proxy's repeated NACKs.
type Backoff struct {
	// Initial is the delay of the first NACK of a type; each further NACK
	// in a row doubles it. Default 100ms.
	Initial time.Duration
	// Max caps the delay. Default 10s.
	Max time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 100 * time.Millisecond
	}
	if b.Max < b.Initial {
		b.Max = max(10*time.Second, b.Initial)
	}
	return b
}

// nackBackoff holds back the requests that carry a NACK, per stream and
// type, doubling the delay with every NACK in a row and forgetting it at
// the first ACK.
//
// It exists because a watch cache (as go-control-plane's LinearCache)
// answers a request at once when its version differs from the cache's,
// and a proxy that rejects its very first response asks again with no
// version: it would be sent the same rejected resources in a tight loop,
// burning CPU on both ends and flooding the logs. (A NACK of a later response names the last
// accepted version and waits for a change, but a backoff costs that case
// nothing: the response it gets back would be the same one anyway.)
//
// The delay is taken in go-control-plane's request callback, on the
// stream's own goroutine, so it holds back that stream only, and ends as
// soon as the stream does.
type nackBackoff struct {
	policy Backoff
	clk    clock.WithTicker // times the waits

	mu      sync.Mutex // guards streams and each nackStream's nacks
	streams map[streamKey]*nackStream
}

// nackStream is one open stream's backoff state.
type nackStream struct {
	done  <-chan struct{} // the stream's context; set once, read without mu
	nacks map[string]int  // type URL → NACKs in a row
}

func newNACKBackoff(p Backoff, clk clock.WithTicker) *nackBackoff {
	return &nackBackoff{policy: p.withDefaults(), clk: clk, streams: map[streamKey]*nackStream{}}
}

func (b *nackBackoff) opened(ctx context.Context, k streamKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streams[k] = &nackStream{done: ctx.Done(), nacks: map[string]int{}}
}

func (b *nackBackoff) closed(k streamKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.streams, k)
}

// delay returns how long to hold back a request of typeURL on stream k,
// nack telling whether it carries an error, and the channel that ends the
// wait early (the stream's end). An ACK, or a first request, waits not.
func (b *nackBackoff) delay(k streamKey, typeURL string, nack bool) (time.Duration, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.streams[k]
	if s == nil {
		return 0, nil
	}
	if !nack {
		delete(s.nacks, typeURL)
		return 0, nil
	}
	n := s.nacks[typeURL]
	s.nacks[typeURL] = n + 1
	d := b.policy.Initial
	for range n {
		if d >= b.policy.Max/2 {
			d = b.policy.Max
			break
		}
		d *= 2
	}
	return min(d, b.policy.Max), s.done
}

// wait holds back a request as delay says, on the injected clock; it
// reports the delay taken. It takes mu only inside delay, never while it
// waits.
func (b *nackBackoff) wait(k streamKey, typeURL string, nack bool) time.Duration {
	d, done := b.delay(k, typeURL, nack)
	if d == 0 {
		return 0
	}
	t := b.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-done:
	}
	return d
}
