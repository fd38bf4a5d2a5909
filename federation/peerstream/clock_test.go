package peerstream_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation/peerstream"
)

// TestPeerHelloTimeoutOnTheInjectedClock: a stream that sends no Hello is
// refused when the injected clock passes HelloTimeout, and not before,
// however long that is on the wall clock.
func TestPeerHelloTimeoutOnTheInjectedClock(t *testing.T) {
	f := newPeerFleet(t)
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	b := f.start("b", "", func(o *peerstream.PeerOptions) {
		o.Clock = clk
		o.HelloTimeout = time.Hour
	})
	before := b.rejected(t, "no_hello")
	_, client := f.tlsFor("a")
	raw := dialPeerRaw(t, b.addr, client)
	ended := make(chan error, 1)
	go func() {
		_, err := raw.recv()
		ended <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the server never waited for the Hello on the injected clock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	clk.Step(time.Hour - time.Second)
	select {
	case err := <-ended:
		t.Fatalf("the stream ended before HelloTimeout passed on the injected clock: %v", err)
	default:
	}
	clk.Step(time.Second)
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("got a frame, want the stream refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream lives on after HelloTimeout passed on the injected clock")
	}
	if got := b.rejected(t, "no_hello") - before; got != 1 {
		t.Errorf("rejected{reason=no_hello} grew by %v, want 1", got)
	}
}
