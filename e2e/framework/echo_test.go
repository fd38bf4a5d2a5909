package framework

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestEchoFaults: an echo server without faults answers every call; with
// FailEvery 2 it fails the second, fourth, … call after the faults were
// set, with UNAVAILABLE unless another code is set; with a delay it
// answers no sooner, or ends the call when the caller gives up first; and
// SetFaults(nil) brings the plain behaviour back.
func TestEchoFaults(t *testing.T) {
	srv := startTestEcho(t, "127.30.0.8:0", "c/p")
	cc, err := grpc.NewClient("passthrough:///"+srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	codesOf := func(n int) []codes.Code {
		t.Helper()
		var out []codes.Code
		for range n {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := CallEcho(ctx, cc)
			cancel()
			out = append(out, status.Code(err))
		}
		return out
	}
	expect := func(what string, got []codes.Code, want ...codes.Code) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d calls, want %d", what, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: calls ended %v, want %v", what, got, want)
				return
			}
		}
	}
	ok, unavailable, exhausted := codes.OK, codes.Unavailable, codes.ResourceExhausted

	expect("no faults", codesOf(3), ok, ok, ok)
	srv.SetFaults(&EchoFaults{FailEvery: 2})
	expect("every second call", codesOf(5), ok, unavailable, ok, unavailable, ok)
	// Setting faults again counts afresh.
	srv.SetFaults(&EchoFaults{FailEvery: 2})
	expect("every second call, reset", codesOf(2), ok, unavailable)
	srv.SetFaults(&EchoFaults{FailEvery: 1, Code: codes.ResourceExhausted})
	expect("every call", codesOf(3), exhausted, exhausted, exhausted)
	if got := srv.Served(); got != 13 {
		t.Errorf("served %d calls, want 13 (failed ones included)", got)
	}

	const delay = 300 * time.Millisecond
	srv.SetFaults(&EchoFaults{Delay: delay})
	start := time.Now()
	if _, err := CallEcho(t.Context(), cc); err != nil {
		t.Fatalf("delayed call: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("delayed call answered after %v, before the %v delay", took, delay)
	}
	ctx, cancel := context.WithTimeout(t.Context(), delay/3)
	_, err = CallEcho(ctx, cc)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call giving up before the delay: %v, want DEADLINE_EXCEEDED", err)
	}

	srv.SetFaults(nil)
	expect("faults removed", codesOf(3), ok, ok, ok)
}
