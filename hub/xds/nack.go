package xds

import (
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
// The delay is taken in the stream's request hook, on the stream's own
// goroutine, so it holds back that stream only, and ends as soon as the
// stream does. Each stream keeps its own NACKs in a row (nackRuns, in
// its conn); nackBackoff is only the policy and the clock.
type nackBackoff struct {
	policy Backoff
	clk    clock.WithTicker // times the waits
}

// nackRuns is one stream's NACKs in a row, by type URL; owned by the
// stream's goroutine.
type nackRuns map[string]int

func newNACKBackoff(p Backoff, clk clock.WithTicker) *nackBackoff {
	return &nackBackoff{policy: p.withDefaults(), clk: clk}
}

// delay returns how long to hold back a request of typeURL on a stream
// with runs, nack telling whether it carries an error, and records it.
// An ACK, or a first request, waits not.
func (b *nackBackoff) delay(runs nackRuns, typeURL string, nack bool) time.Duration {
	if !nack {
		delete(runs, typeURL)
		return 0
	}
	n := runs[typeURL]
	runs[typeURL] = n + 1
	d := b.policy.Initial
	for range n {
		if d >= b.policy.Max/2 {
			d = b.policy.Max
			break
		}
		d *= 2
	}
	return min(d, b.policy.Max)
}

// wait holds back a request as delay says, on the injected clock, or
// until done (the stream's end) is closed; it reports the delay taken.
func (b *nackBackoff) wait(done <-chan struct{}, runs nackRuns, typeURL string, nack bool) time.Duration {
	d := b.delay(runs, typeURL, nack)
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
