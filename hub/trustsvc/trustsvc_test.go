package trustsvc_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/trustsvc"
	"github.com/meshfed/meshfed/pkg/model"
	meshtest "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/trustapi"
)

type fakeAuthn struct{}

func (fakeAuthn) Authenticate(_ context.Context, c model.ClusterID, token string) (ca.Identity, error) {
	switch {
	case token == "good" || strings.HasPrefix(token, "jwt."):
		return ca.Identity{Cluster: c, Namespace: "istio-system", ServiceAccount: "meshfed-spoke"}, nil
	case token == "down":
		return ca.Identity{}, fmt.Errorf("%w: apiserver unreachable", ca.ErrTokenReview)
	}
	return ca.Identity{}, fmt.Errorf("%w: forged", ca.ErrTokenRejected)
}

type bundle struct {
	mu    sync.Mutex
	roots []federation.Root
}

func (b *bundle) get() []federation.Root {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.roots
}

func root(fp string) federation.Root {
	return federation.Root{Fingerprint: fp, TrustDomain: "cluster.local", PEM: []byte("-----BEGIN CERTIFICATE-----\n" + fp + "\n-----END CERTIFICATE-----\n")}
}

func start(t *testing.T) (*trustsvc.Service, *bundle, chan struct{}, *grpc.ClientConn) {
	t.Helper()
	return startWith(t, nil, nil)
}

// startWith is start with metrics registered on reg and the Service on clk
// (each when not nil).
func startWith(t *testing.T, reg prometheus.Registerer, clk clock.WithTicker) (*trustsvc.Service, *bundle, chan struct{}, *grpc.ClientConn) {
	t.Helper()
	b := &bundle{roots: []federation.Root{root("aa")}}
	changed := make(chan struct{}, 1)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	svc, err := trustsvc.Register(srv, trustsvc.Options{Authenticator: fakeAuthn{}, Roots: b.get, Changed: changed, Metrics: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = svc.Run(ctx) }()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { cancel(); srv.Stop() })
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return svc, b, changed, cc
}

func watch(ctx context.Context, cc *grpc.ClientConn, cluster, token, version string) (grpc.ServerStreamingClient[wrapperspbBytes], error) {
	md := []string{trustapi.MetadataClusterID, cluster, trustapi.MetadataSpokeVersion, version}
	if token != "" {
		md = append(md, trustapi.MetadataAuthorization, "Bearer "+token)
	}
	return trustapi.Watch(metadata.AppendToOutgoingContext(ctx, md...), cc)
}

func recv(t *testing.T, st grpc.ServerStreamingClient[wrapperspbBytes]) trustapi.Bundle {
	t.Helper()
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	b, err := trustapi.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWatchRefused(t *testing.T) {
	_, _, _, cc := start(t)
	for _, tc := range []struct {
		token string
		want  codes.Code
	}{{"", codes.Unauthenticated}, {"forged", codes.Unauthenticated}, {"down", codes.Unavailable}} {
		st, err := watch(t.Context(), cc, "cluster-1", tc.token, "v1")
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != tc.want {
			t.Errorf("token %q: %v, want %v", tc.token, err, tc.want)
		}
	}
}

// TestWatchFanOut: every stream gets the bundle at once and again on each
// change, though the change channel is a single coalescing one; Spokes
// records version and health per cluster.
func TestWatchFanOut(t *testing.T) {
	svc, b, changed, cc := start(t)
	ctx1, cancel1 := context.WithCancel(t.Context())
	s1, err := watch(ctx1, cc, "cluster-1", "good", "v1")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := watch(t.Context(), cc, "cluster-2", "good", "v2")
	if err != nil {
		t.Fatal(err)
	}
	first := recv(t, s1)
	if len(first.Roots) != 1 || first.Roots[0].Fingerprint != "aa" || first.Version == "" {
		t.Fatalf("first bundle = %+v", first)
	}
	if got := recv(t, s2); got.Version != first.Version {
		t.Fatalf("stream 2 version %s, want %s", got.Version, first.Version)
	}

	b.mu.Lock()
	b.roots = []federation.Root{root("aa"), root("bb")}
	b.mu.Unlock()
	changed <- struct{}{}
	for i, st := range []grpc.ServerStreamingClient[wrapperspbBytes]{s1, s2} {
		got := recv(t, st)
		if len(got.Roots) != 2 || got.Version == first.Version {
			t.Errorf("stream %d after change: %+v", i+1, got)
		}
		if string(got.PEM()) != string(root("aa").PEM)+string(root("bb").PEM) {
			t.Errorf("stream %d PEM = %q", i+1, got.PEM())
		}
	}

	sp := svc.Spokes()
	if len(sp) != 2 || sp[0].Cluster != "cluster-1" || sp[0].Version != "v1" || !sp[0].Healthy || sp[1].Version != "v2" ||
		sp[0].Identity != "cluster-1/istio-system/meshfed-spoke" {
		t.Fatalf("Spokes = %+v", sp)
	}
	cancel1()
	meshtest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if svc.Spokes()[0].Healthy {
			return errors.New("cluster-1 still healthy after its stream closed")
		}
		return nil
	})
	if sp := svc.Spokes(); !sp[1].Healthy || sp[0].LastSeen.IsZero() {
		t.Errorf("Spokes after close = %+v", sp)
	}
}

// TestAgentsAreNotSpokes: a workload agent (x-meshfed-client: agent) is
// served the bundle like a spoke, but only spokes (with "spoke" or, as
// older spokes do, without the key) are listed by Spokes; the stream gauge
// tells the two apart.
func TestAgentsAreNotSpokes(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, _, _, cc := startWith(t, reg, nil)
	asAgent := metadata.AppendToOutgoingContext(t.Context(), trustapi.MetadataClient, trustapi.ClientAgent)
	sa, err := watch(asAgent, cc, "cluster-1", "good", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, sa); len(got.Roots) != 1 || got.Roots[0].Fingerprint != "aa" {
		t.Fatalf("agent's bundle = %+v", got)
	}
	asSpoke := metadata.AppendToOutgoingContext(t.Context(), trustapi.MetadataClient, trustapi.ClientSpoke)
	for _, tc := range []struct {
		ctx     context.Context
		cluster string
	}{{asSpoke, "cluster-2"}, {t.Context(), "cluster-3"}} {
		st, err := watch(tc.ctx, cc, tc.cluster, "good", "v1")
		if err != nil {
			t.Fatal(err)
		}
		recv(t, st)
	}
	sp := svc.Spokes()
	if len(sp) != 2 || sp[0].Cluster != "cluster-2" || sp[1].Cluster != "cluster-3" || !sp[0].Healthy || sp[0].BundleVersion == "" {
		t.Fatalf("Spokes = %+v, want cluster-2 and cluster-3 only", sp)
	}
	want := `
# HELP meshfed_hub_trust_streams Open trust-bundle Watch streams, by client: spoke (spoke shims) or agent (workload agents).
# TYPE meshfed_hub_trust_streams gauge
meshfed_hub_trust_streams{client="agent"} 1
meshfed_hub_trust_streams{client="spoke"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshfed_hub_trust_streams"); err != nil {
		t.Error(err)
	}
}

func TestNewRequiresOptions(t *testing.T) {
	if _, err := trustsvc.New(trustsvc.Options{}); err == nil {
		t.Error("New without options succeeded")
	}
}

type wrapperspbBytes = wrapperspb.BytesValue

// When the service stops (Run's context ends, the hub shuts down), open
// streams end with Unavailable, so the gRPC server's graceful stop does not
// wait on them and the clients reconnect to another replica.
func TestStreamsEndOnStop(t *testing.T) {
	b := &bundle{roots: []federation.Root{root("aa")}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	svc, err := trustsvc.Register(srv, trustsvc.Options{Authenticator: fakeAuthn{}, Roots: b.get, Changed: make(chan struct{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(ran) }()
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := watch(t.Context(), cc, "cluster-1", "good", "v1")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, st)
	cancel()
	<-ran
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after stop: %v, want Unavailable", err)
	}
	<-stopped // GracefulStop returns: no stream holds it
}

// A stream ends when the token that opened it expires (Unauthenticated), so
// the client comes back with a fresh token that is reviewed again. The
// expiry is timed by the Service's clock.
func TestStreamEndsWithItsToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	_, _, _, cc := startWith(t, nil, clk)
	exp := clk.Now().Add(time.Hour)
	claims := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, exp.Unix())))
	st, err := watch(t.Context(), cc, "cluster-1", "jwt."+claims+".sig", "v1")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, st)
	// The stream's expiry timer is the clock's only waiter.
	meshtest.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if !clk.HasWaiters() {
			return errors.New("the stream waits on no timer of the clock")
		}
		return nil
	})
	clk.SetTime(exp)
	if _, err := st.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream at its token's expiry: %v, want Unauthenticated", err)
	}
}
