package xds

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

func TestClip(t *testing.T) {
	if got := xdsstatus.Clip("short", 10); got != "short" {
		t.Errorf("clip kept %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes, 2 per rune
	got := xdsstatus.Clip(long, 51)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, strings.Repeat("é", 25)+"…") || !strings.HasSuffix(got, "(200 bytes)") {
		t.Errorf("xdsstatus.Clip(200 bytes, 51) = %q", got)
	}
}

// logBuffer is a logr sink into a buffer, verbosity 0, safe for
// concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) write(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(prefix + args + "\n")
}

func (b *logBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// TestOversizedInput: a node whose CLUSTER_ID is 128 KiB is refused with
// InvalidArgument naming the field, counted, and builds no proxy group;
// a 1 MiB NACK message is kept in status and logged cut short; other
// proxies are served throughout.
func TestOversizedInput(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	s := runServer(t, Options{Registry: st, Metrics: reg, Log: funcr.New(logs.write, funcr.Options{})})
	addr := s.Addr().String()

	big := newADS(t, addr, "c1", "r1")
	big.node.Metadata.Fields[xdsnode.MetadataClusterID] = structpb.NewStringValue(strings.Repeat("c", 128<<10))
	big.request(resourcev3.EndpointType, "", "", xdsgen.ClusterName(echo, 8080))
	_, err := big.stream.Recv()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "CLUSTER_ID is 131072 bytes") {
		t.Fatalf("oversized CLUSTER_ID: %v, want InvalidArgument naming it", err)
	}
	if n := promtestutil.ToFloat64(s.metrics.refused.WithLabelValues(reasonNodeTooLarge)); n != 1 {
		t.Errorf("meshfed_xds_requests_refused_total{reason=node_too_large} = %v, want 1", n)
	}
	if h := s.cache.held(); h.caches != 0 || h.planned != 0 {
		t.Errorf("the refused stream left groups behind: %+v", h)
	}

	// A proxy that NACKs with a 1 MiB message.
	good := newADS(t, addr, "c1", "r1")
	good.request(resourcev3.EndpointType, "", "", xdsgen.ClusterName(echo, 8080))
	r := good.recv()
	before := logs.Len()
	if err := good.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: good.node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{xdsgen.ClusterName(echo, 8080)},
		ResponseNonce: r.GetNonce(), ErrorDetail: &status.Status{Message: strings.Repeat("x", 1<<20)},
	}); err != nil {
		t.Fatal(err)
	}
	waitutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, rec := range s.Status().Records() {
			for _, ts := range rec.Types {
				if ts.Nack != "" {
					if len(ts.Nack) > xdsstatus.MaxDetailBytes+32 {
						t.Fatalf("status keeps a NACK message of %d bytes", len(ts.Nack))
					}
					return nil
				}
			}
		}
		return errors.New("no NACK recorded yet")
	})
	// The NACK is logged after it is recorded.
	waitutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		if !strings.Contains(logs.buf.String(), "(1048576 bytes)") {
			return errors.New("the NACK is not logged, or its log does not say how long it was")
		}
		return nil
	})
	if grown := logs.Len() - before; grown > 4*maxLoggedDetailBytes {
		t.Errorf("a 1 MiB NACK grew the log by %d bytes", grown)
	}
}

// TestNACKLogRate: of many streams' first NACKs at once, nackLogBurst are
// logged at info level and the rest counted and logged at debug level;
// as the clock moves, nackLogRate a second are logged again.
func TestNACKLogRate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	logs := &logBuffer{}
	s := New(Options{Registry: store.New(store.Options{Self: "test"}), Clock: clk, Metrics: prometheus.NewRegistry(),
		Log: funcr.New(logs.write, funcr.Options{})})
	initial := s.nacks.policy.Initial
	infoLines := func() int {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Count(logs.buf.String(), `"msg"="proxy rejected config"`)
	}
	for range nackLogBurst + 10 {
		s.logNACK("node", resourcev3.ClusterType, "bad", initial)
	}
	if got := infoLines(); got != nackLogBurst {
		t.Errorf("%d NACKs logged at info level of %d at once, want %d", got, nackLogBurst+10, nackLogBurst)
	}
	if got := promtestutil.ToFloat64(s.metrics.nackLogs); got != 10 {
		t.Errorf("meshfed_xds_nack_logs_suppressed_total = %v, want 10", got)
	}
	clk.Step(time.Second)
	for range nackLogRate + 5 {
		s.logNACK("node", resourcev3.ClusterType, "bad", initial)
	}
	if got := infoLines(); got != nackLogBurst+nackLogRate {
		t.Errorf("after a second, %d logged at info level in all, want %d", got, nackLogBurst+nackLogRate)
	}
}
