package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// admittedServer runs a server on one shard whose streams are admitted by a
// new Admission over l, on clk.
func admittedServer(t *testing.T, l Limits, clk *clocktesting.FakeClock) (*Server, *Admission) {
	t.Helper()
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	adm := NewAdmission(l, clk, reg)
	return runServer(t, Options{Registry: st, Metrics: reg, Admission: adm}), adm
}

// firstAnswer opens an ADS stream and returns the error of its first
// answer to an EDS request (nil when it is answered).
func firstAnswer(t *testing.T, addr string) (*adsClient, error) {
	t.Helper()
	a := newADS(t, addr, "c1", "r1")
	// A refused stream may end before the request is sent: Send then says
	// io.EOF, and Recv has the status (as grpc-go documents).
	err := a.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: a.node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{xdsgen.ClusterName(echo, 8080)},
	})
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = a.stream.Recv()
	return a, err
}

func wantExhausted(t *testing.T, err error, says string) {
	t.Helper()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), says) {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED saying %q", err, says)
	}
}

// TestStreamLimit: beyond MaxStreams a stream is refused with
// RESOURCE_EXHAUSTED naming the limit, and counted; the open streams keep
// being served; once one closes, a new stream is admitted. CSDS is not
// limited.
func TestStreamLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s, adm := admittedServer(t, Limits{MaxStreams: 2}, clk)
	addr := s.Addr().String()
	first, err := firstAnswer(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := firstAnswer(t, addr); err != nil {
		t.Fatal(err)
	}
	_, err = firstAnswer(t, addr)
	wantExhausted(t, err, "2 ADS streams open, its limit")
	if n := promtestutil.ToFloat64(adm.refused.WithLabelValues(reasonStreamLimit)); n != 1 {
		t.Errorf("refused{stream_limit} = %v, want 1", n)
	}
	if n := promtestutil.ToFloat64(adm.gauge); n != 2 {
		t.Errorf("meshfed_xds_streams_open = %v, want 2", n)
	}
	// CSDS still answers while ADS is full.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{}); err != nil {
		t.Errorf("CSDS at the stream limit: %v", err)
	}
	// An open stream is untouched: it ACKs and is answered again on a
	// new subscription.
	first.request(resourcev3.ClusterType, "", "")
	if r := first.recv(); r.GetTypeUrl() != resourcev3.ClusterType {
		t.Errorf("open stream answered %s", r.GetTypeUrl())
	}
	first.disconnect()
	deadline := time.Now().Add(10 * time.Second)
	for promtestutil.ToFloat64(adm.gauge) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := firstAnswer(t, addr); err != nil {
		t.Errorf("after a stream closed: %v", err)
	}
}

// TestStreamRate: beyond the burst, new streams are refused until the
// rate lets more in (on the injected clock).
func TestStreamRate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s, adm := admittedServer(t, Limits{StreamRate: 1, StreamBurst: 2}, clk)
	addr := s.Addr().String()
	for range 2 {
		if _, err := firstAnswer(t, addr); err != nil {
			t.Fatal(err)
		}
	}
	_, err := firstAnswer(t, addr)
	wantExhausted(t, err, "more than 1 new ADS streams a second (burst 2)")
	if n := promtestutil.ToFloat64(adm.refused.WithLabelValues(reasonStreamRate)); n != 1 {
		t.Errorf("refused{stream_rate} = %v, want 1", n)
	}
	clk.Step(time.Second)
	if _, err := firstAnswer(t, addr); err != nil {
		t.Errorf("a second later: %v", err)
	}
}

// TestHandshakeTimeout: a connection that sends nothing is closed by the
// server after HandshakeTimeout.
func TestHandshakeTimeout(t *testing.T) {
	s, _ := admittedServer(t, Limits{HandshakeTimeout: 300 * time.Millisecond}, clocktesting.NewFakeClock(time.Now()))
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("a silent connection was still open after 10 s")
			}
			break // closed by the server
		}
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the handshake timeout", d)
	}
	t.Logf("silent connection closed after %v", time.Since(start).Round(time.Millisecond))
}

// TestOversizedRequest: a DiscoveryRequest over MaxRequestBytes ends its
// stream with RESOURCE_EXHAUSTED and is counted; a stream open beside it
// keeps being answered.
func TestOversizedRequest(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s, adm := admittedServer(t, Limits{}, clk)
	addr := s.Addr().String()
	other, err := firstAnswer(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	big := newADS(t, addr, "c1", "r1")
	names := make([]string, 0, MaxRequestBytes/1000+1)
	for i := range cap(names) {
		names = append(names, strings.Repeat("x", 1000-8)+fmt.Sprintf("%08d", i))
	}
	err = big.stream.Send(&discoveryv3.DiscoveryRequest{Node: big.node, TypeUrl: resourcev3.EndpointType, ResourceNames: names})
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = big.stream.Recv()
	wantExhausted(t, err, "larger than max")
	if n := promtestutil.ToFloat64(adm.refused.WithLabelValues(reasonMessageTooLarge)); n != 1 {
		t.Errorf("%v oversized requests counted, want 1", n)
	}
	// The other stream is still served: a new request on it is answered.
	if err := other.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: other.node, TypeUrl: resourcev3.ClusterType,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.stream.Recv(); err != nil {
		t.Fatalf("the stream beside the oversized one: %v", err)
	}
}

// TestUnknownCluster: with KnownCluster set, a first request whose
// CLUSTER_ID names no cluster is refused with InvalidArgument naming it and
// counted, once the answer is decided; before that (a starting hub) it is
// served, as a known cluster is.
func TestUnknownCluster(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	var decided atomic.Bool
	reg := prometheus.NewRegistry()
	s := runServer(t, Options{Registry: st, Metrics: reg, KnownCluster: func(id model.ClusterID) (bool, bool) {
		return id == "c1", decided.Load()
	}})
	addr := s.Addr().String()
	ask := func(cluster model.ClusterID) error {
		a := newADS(t, addr, cluster, "r1")
		err := a.stream.Send(&discoveryv3.DiscoveryRequest{
			Node: a.node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{xdsgen.ClusterName(echo, 8080)},
		})
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		_, err = a.stream.Recv()
		return err
	}
	if err := ask("elsewhere"); err != nil {
		t.Fatalf("undecided: an unknown cluster is refused: %v", err)
	}
	decided.Store(true)
	err := ask("elsewhere")
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"elsewhere"`) {
		t.Fatalf("unknown cluster: %v, want InvalidArgument naming it", err)
	}
	if err := ask("c1"); err != nil {
		t.Fatalf("known cluster: %v", err)
	}
	if err := ask(""); err != nil {
		t.Fatalf("no CLUSTER_ID: %v", err)
	}
	if n := promtestutil.ToFloat64(s.metrics.refused.WithLabelValues(reasonUnknownCluster)); n != 1 {
		t.Errorf("%v refusals counted, want 1", n)
	}
}
