package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// The tests of this file run a fleet of three remote clusters (echo with
// two replicas in each, versionedWorkloads) and one hub, and a real grpc-go xDS client in
// cluster-1, which the hub sends to cluster-1's replicas while they are
// ready. The test makes those replicas misbehave and checks that the
// VirtualService or DestinationRule it applies in the config cluster makes
// grpc-go do what Istio's field says. grpc-go NACKs a route or cluster it
// does not accept and keeps the one it had, so a passing test also shows
// it accepted what the hub generated; each test also checks that the hub
// counted no NACK.

// echoRetries retries every call on UNAVAILABLE, behind a rule that never
// matches but uses every other route field grpc-go reads, so that grpc-go
// has to accept those too for the retries to arrive.
const echoRetries = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - name: everything
    match:
    - uri: {regex: "/never/.*"}
      ignoreUriCase: true
      headers: {x-never: {regex: "[0-9]+"}, x-present: {}}
      withoutHeaders: {x-absent: {}}
      method: {exact: POST}
      port: 8080
    - {uri: {prefix: /NEVER}, ignoreUriCase: true, headers: {x-never: {prefix: a}}}
    timeout: 3s
    retries: {attempts: 2}
    fault:
      delay: {fixedDelay: 1ms, percentage: {value: 0.01}}
      abort: {httpStatus: 503, percentage: {value: 0.01}}
    route: [{destination: {host: echo}}]
  - name: flaky
    retries: {attempts: 3, retryOn: unavailable}
    route: [{destination: {host: echo}}]
`

// echoNoRetries turns retries off (attempts 0).
const echoNoRetries = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - retries: {attempts: 0}
    route: [{destination: {host: echo}}]
`

// TestGRPCVirtualServiceRetries: cluster-1's replicas each fail every
// second call with UNAVAILABLE. Round robin alternates between them, so
// without retries about half the calls fail; under a VirtualService
// retrying up to 3 times on unavailable every call succeeds (no more than
// two attempts in a row can meet a failing turn); attempts 0 brings the
// failures back.
func TestGRPCVirtualServiceRetries(t *testing.T) {
	f, hubs, workloads := versionedWorkloads(t, 1)
	conn := clientIn(t, f, hubs[0], "cluster-1")
	echo1 := workloads["cluster-1"]
	expectBackends(t, conn, echo1.Backends()...)
	echo1.SetFaults(&framework.EchoFaults{FailEvery: 2, Code: codes.Unavailable})

	const n = 20
	if failed := failures(t, conn, n, codes.Unavailable); failed == 0 || failed == n {
		t.Fatalf("without retries %d of %d calls failed, want about half", failed, n)
	} else {
		t.Logf("without retries %d of %d calls failed", failed, n)
	}

	applyIstio(t, f, echoRetries)
	testutil.Eventually(t, converge, poll, func() error {
		if failed := failures(t, conn, n, codes.Unavailable); failed > 0 {
			return fmt.Errorf("with retries %d of %d calls failed, want none", failed, n)
		}
		return nil
	})

	applyIstio(t, f, echoNoRetries)
	testutil.Eventually(t, converge, poll, func() error {
		if failures(t, conn, n, codes.Unavailable) == 0 {
			return fmt.Errorf("with attempts 0 all %d calls succeeded, want some to fail", n)
		}
		return nil
	})
	expectNoNACKs(t, hubs[0])
}

const echoOutlierDetection = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 1s, baseEjectionTime: 5m, maxEjectionPercent: 100}
`

// TestGRPCDestinationRuleOutlierDetection: one of cluster-1's two replicas
// fails every call. Without a DestinationRule round robin keeps picking
// it, for longer than three detection intervals; under outlierDetection
// (which the hub translates for grpc-go into failure-percentage
// detection) it is ejected after an interval in which it failed at least
// 3 calls, and then a run of 30 calls all succeed.
func TestGRPCDestinationRuleOutlierDetection(t *testing.T) {
	f, hubs, workloads := versionedWorkloads(t, 1)
	conn := clientIn(t, f, hubs[0], "cluster-1")
	echo1 := workloads["cluster-1"]
	expectBackends(t, conn, echo1.Backends()...)
	bad := echo1.Replicas()[1]
	if err := echo1.SetReplicaFaults(bad.Pod, &framework.EchoFaults{FailEvery: 1, Code: codes.Unavailable}); err != nil {
		t.Fatal(err)
	}

	testutil.Consistently(t, 3*time.Second, 100*time.Millisecond, func() error {
		if failures(t, conn, 10, codes.Unavailable) == 0 {
			return fmt.Errorf("10 calls succeeded: %s left the rotation without outlier detection", bad.Identity)
		}
		return nil
	})

	applyIstio(t, f, echoOutlierDetection)
	const run = 30
	testutil.Eventually(t, converge, poll, func() error {
		if failed := failures(t, conn, run, codes.Unavailable); failed > 0 {
			return fmt.Errorf("%d of %d calls failed: %s not ejected", failed, run, bad.Identity)
		}
		return nil
	})
	expectNoNACKs(t, hubs[0])
}

// echoTimeout gives calls to echo a route timeout, and with delay a delay
// fault of that length; calls carrying x-probe: 1 are aborted with probe,
// which tells the test which version of the VirtualService the client has.
func echoTimeout(probe codes.Code, timeout, delay time.Duration) string {
	fault := ""
	if delay > 0 {
		fault = fmt.Sprintf("fault: {delay: {fixedDelay: %s, percentage: {value: 100}}}", delay)
	}
	return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - name: probe
    match: [{headers: {x-probe: {exact: "1"}}}]
    fault: {abort: {grpcStatus: %s, percentage: {value: 100}}}
    route: [{destination: {host: echo}}]
  - name: timed
    timeout: %s
    %s
    route: [{destination: {host: echo}}]
`, grpcStatusName(probe), timeout, fault)
}

// grpcStatusName is the name Istio's grpcStatus takes for c, e.g. ABORTED.
func grpcStatusName(c codes.Code) string {
	return map[codes.Code]string{codes.Aborted: "ABORTED", codes.FailedPrecondition: "FAILED_PRECONDITION"}[c]
}

// TestGRPCVirtualServiceTimeout: a 200 ms route timeout ends a call to a
// backend that takes 2 s with DEADLINE_EXCEEDED, well within the call's
// own 10 s deadline.
//
// A delay fault on the same route is not counted in that timeout: grpc-go
// (v1.85) runs its xDS HTTP filters as an interceptor around the creation
// of the stream, and the route's timeout (max_stream_duration, which
// internal/xds/resolver/serviceconfig.go:264-265 makes the method config's
// Timeout) starts only in newClientStreamWithParams (stream.go:401-402),
// the newStream that the interceptor calls (stream.go:365-382); the fault
// filter's NewStream waits out the delay first
// (internal/xds/httpfilter/fault/fault.go:160, newStream at :170). So a
// 1 s delay under a 200 ms timeout does not fail the call: it is answered
// after at least the delay, and a backend that takes longer than the
// timeout fails it only after delay + timeout. (Istio's reference says
// timeouts are not enabled with client-side faults; grpc-go enables them,
// from the end of the delay. Envoy's route timeout too starts only when
// its router gets the request, after the fault filter has held it: see
// frontSidecar in istioconfig_envoy_test.go.)
func TestGRPCVirtualServiceTimeout(t *testing.T) {
	const (
		timeout = 200 * time.Millisecond
		slow    = 2 * time.Second // the backend's answer, ≫ timeout
		delay   = time.Second     // the fault's, ≫ timeout
	)
	f, hubs, workloads := versionedWorkloads(t, 1)
	conn := clientIn(t, f, hubs[0], "cluster-1")
	echo1 := workloads["cluster-1"]
	expectBackends(t, conn, echo1.Backends()...)

	applyIstio(t, f, echoTimeout(codes.Aborted, timeout, 0))
	expectProbe(t, conn, codes.Aborted)
	echo1.SetFaults(&framework.EchoFaults{Delay: slow})
	if _, err := timedCall(t, conn); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call to a backend taking %v under a %v route timeout: %v, want DEADLINE_EXCEEDED", slow, timeout, err)
	}

	applyIstio(t, f, echoTimeout(codes.FailedPrecondition, timeout, delay))
	expectProbe(t, conn, codes.FailedPrecondition)
	took, err := timedCall(t, conn)
	if status.Code(err) != codes.DeadlineExceeded || took < delay+timeout {
		t.Errorf("slow backend under a %v delay fault and a %v timeout: %v after %v, want DEADLINE_EXCEEDED after at least %v",
			delay, timeout, err, took, delay+timeout)
	}
	t.Logf("under a %v delay fault and a %v timeout a slow backend's call ended %v after %v", delay, timeout, status.Code(err), took)
	echo1.SetFaults(nil)
	took, err = timedCall(t, conn)
	if err != nil || took < delay {
		t.Errorf("prompt backend under a %v delay fault and a %v timeout: %v after %v, want an answer after at least the delay",
			delay, timeout, err, took)
	}
	t.Logf("under a %v delay fault and a %v timeout a prompt backend answered after %v", delay, timeout, took)
	expectNoNACKs(t, hubs[0])
}

// expectBackends waits until 20 consecutive calls are answered by exactly
// the backends want (identities), each at least once: every one of them is
// in the client's rotation.
func expectBackends(t *testing.T, conn *framework.XDSConn, want ...string) {
	t.Helper()
	slices.Sort(want)
	testutil.Eventually(t, converge, poll, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		counts, err := conn.Spread(ctx, 20)
		if err != nil {
			return err
		}
		if got := slices.Sorted(maps.Keys(counts)); !slices.Equal(got, want) {
			return fmt.Errorf("answered by %v, want %v", counts, want)
		}
		return nil
	})
}

// expectNoNACKs checks that no proxy rejected a response of hub
// (meshfed_xds_nacks_total has no sample above zero).
func expectNoNACKs(t *testing.T, hub *framework.Hub) {
	t.Helper()
	m, err := hub.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(m) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), " "); ok &&
			strings.HasPrefix(name, "meshfed_xds_nacks_total") && value != "0" {
			t.Errorf("the hub counted NACKs: %s", line)
		}
	}
}

// failures makes n calls over conn one after another and counts those
// that failed; a call failing with another code than want fails the test.
func failures(t *testing.T, conn *framework.XDSConn, n int, want codes.Code) int {
	t.Helper()
	failed := 0
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := conn.Call(ctx)
		cancel()
		switch status.Code(err) {
		case codes.OK:
		case want:
			failed++
		default:
			t.Fatalf("call: %v, want OK or %v", err, want)
		}
	}
	return failed
}

// expectProbe waits until calls carrying x-probe: 1 fail with code: the
// client has the VirtualService whose probe rule aborts with it.
func expectProbe(t *testing.T, conn *framework.XDSConn, code codes.Code) {
	t.Helper()
	testutil.Eventually(t, converge, poll, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := conn.Call(metadata.AppendToOutgoingContext(ctx, "x-probe", "1"))
		if status.Code(err) != code {
			return fmt.Errorf("probe call: %v, want %v", err, code)
		}
		return nil
	})
}

// timedCall makes one call with a 10 s deadline, far beyond every timeout
// and delay of the tests, and returns how long it took.
func timedCall(t *testing.T, conn *framework.XDSConn) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := conn.Call(ctx)
	return time.Since(start), err
}
