package xds

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/store"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// nackAll answers every response on a with a NACK (the version it last
// accepted: none) for window, and returns how many responses came in it,
// and the next response, which it leaves unanswered.
func nackAll(a *adsClient, window time.Duration) (int, *discoveryv3.DiscoveryResponse) {
	a.t.Helper()
	type result struct {
		r   *discoveryv3.DiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	recv := func() {
		r, err := a.stream.Recv()
		ch <- result{r, err}
	}
	go recv()
	deadline := time.After(window)
	n := 0
	for {
		select {
		case res := <-ch:
			if res.err != nil {
				a.t.Fatal(res.err)
			}
			n++
			if err := a.stream.Send(&discoveryv3.DiscoveryRequest{
				Node: a.node, TypeUrl: res.r.GetTypeUrl(), ResourceNames: []string{xdsgen.ClusterName(echo, 8080)},
				ResponseNonce: res.r.GetNonce(), ErrorDetail: &status.Status{Message: "rejected by test"},
			}); err != nil {
				a.t.Fatal(err)
			}
			go recv()
		case <-deadline:
			select {
			case res := <-ch:
				if res.err != nil {
					a.t.Fatal(res.err)
				}
				return n, res.r
			case <-time.After(10 * time.Second):
				a.t.Fatal("no response after the NACKs within 10s")
				return n, nil
			}
		}
	}
}

// A proxy that rejects everything it is sent is not resent the same
// config in a tight loop: go-control-plane's LinearCache answers a request
// that accepted no version at once, so without a backoff each NACK
// brings the same response back within microseconds.
func TestNACKBackoff(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	gen := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", gen, shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	addr := serveOpts(t, Options{Registry: st, NACKBackoff: Backoff{Initial: 50 * time.Millisecond, Max: 400 * time.Millisecond}})

	a := newADS(t, addr, "c1", "r1")
	a.request(resourcev3.EndpointType, "", "", xdsgen.ClusterName(echo, 8080))
	// 50+100+200+400+400 ms: at most 6 responses in a second, where the
	// loop without a backoff makes thousands.
	n, r := nackAll(a, time.Second)
	t.Logf("%d responses to a proxy that NACKs everything, in 1s", n)
	if n < 2 || n > 10 {
		t.Fatalf("%d responses in 1s to a NACKing proxy, want a few (backed off), and more than one (retried)", n)
	}

	// An ACK ends the backoff: the next change arrives at once.
	a.request(resourcev3.EndpointType, r.GetVersionInfo(), r.GetNonce(), xdsgen.ClusterName(echo, 8080))
	if err := st.UpdateShard("c1", gen, echo, shard("c1", "r1", "10.1.0.1", "10.1.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r = a.recv()
	if len(cla(t, r).GetEndpoints()) == 0 {
		t.Fatalf("empty load assignment after the change")
	}
	t.Logf("change after the ACK delivered in %v", time.Since(start))
}

// TestNACKBackoffOnClock: the hold-back is timed by the injected clock, so
// a test drives it: a NACK waits until the clock has moved by the delay,
// the delay doubles per NACK in a row up to Max, an ACK resets it, and the
// stream's end cuts a wait short.
func TestNACKBackoffOnClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC))
	b := newNACKBackoff(Backoff{Initial: time.Second, Max: 3 * time.Second}, clk)
	runs := nackRuns{}
	ctx, cancel := context.WithCancel(context.Background())
	eds := resourcev3.EndpointType

	waiting := func() error {
		if !clk.HasWaiters() {
			return errors.New("no wait on the clock")
		}
		return nil
	}
	// nack starts a NACK's wait and returns the channel of its result once
	// it waits on the clock.
	nack := func() <-chan time.Duration {
		t.Helper()
		done := make(chan time.Duration, 1)
		go func() { done <- b.wait(ctx.Done(), runs, eds, true) }()
		waitutil.Eventually(t, 10*time.Second, time.Millisecond, waiting)
		return done
	}
	notDone := func(done <-chan time.Duration) func() error {
		return func() error {
			select {
			case d := <-done:
				return fmt.Errorf("wait ended after %v, before the clock moved enough", d)
			default:
				return nil
			}
		}
	}
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		done := nack()
		clk.Step(want - time.Millisecond)
		waitutil.Consistently(t, 50*time.Millisecond, 5*time.Millisecond, notDone(done))
		clk.Step(time.Millisecond)
		select {
		case got := <-done:
			if got != want {
				t.Fatalf("held back %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a %v wait did not end when the clock reached it", want)
		}
	}

	// An ACK ends the backoff at once; the next NACK starts over.
	if d := b.wait(ctx.Done(), runs, eds, false); d != 0 {
		t.Fatalf("an ACK was held back %v", d)
	}
	done := nack()
	// The stream's end cuts the wait short, with the clock standing still.
	cancel()
	select {
	case got := <-done:
		if got != time.Second {
			t.Fatalf("after the ACK the NACK was held back %v, want the initial 1s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's end did not end the wait")
	}
	// An ended stream is not held back: its NACK's wait ends at once,
	// with the clock standing still.
	ended := make(chan time.Duration, 1)
	go func() { ended <- b.wait(ctx.Done(), runs, eds, true) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("a NACK of an ended stream was held back")
	}
}
