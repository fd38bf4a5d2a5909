//go:build linux

package framework

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"a\nb\nc\n", 0, ""},
		{"", 3, ""},
	} {
		if got := lastLines(c.in, c.n); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// TestEnvoyOptionsArgs: the bootstrap Envoy reads is the one given, and
// --concurrency is passed only when set.
func TestEnvoyOptionsArgs(t *testing.T) {
	b := &bootstrapv3.Bootstrap{
		Node:             &corev3.Node{Id: "n"},
		StaticResources:  &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{GRPCCluster("xds-grpc", PipeAddress("/x"))}},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{AdsConfig: ADSConfig("xds-grpc")},
	}
	opts := EnvoyOptions{Binary: "envoy", Dir: t.TempDir(), Bootstrap: b}
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	args, err := opts.args(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-c", filepath.Join(opts.Dir, "bootstrap.pb"), "--disable-hot-restart", "--log-level", "info"}
	if !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	raw, err := os.ReadFile(want[1])
	if err != nil {
		t.Fatal(err)
	}
	got := &bootstrapv3.Bootstrap{}
	if err := proto.Unmarshal(raw, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, b) {
		t.Errorf("bootstrap.pb holds %v, want %v", got, b)
	}

	opts.Concurrency = 1
	if args, _ := opts.args(b); !slices.Contains(args, "--concurrency") {
		t.Errorf("Concurrency 1: args %q lack --concurrency", args)
	}
	if err := (&EnvoyOptions{Binary: "envoy"}).defaults(); err == nil {
		t.Error("EnvoyOptions without Dir and Bootstrap accepted")
	}
}

// TestStartEnvoy runs real Envoy: its admin answers once StartEnvoy
// returns, a missing admin page is an error, and Stop ends the process.
func TestStartEnvoy(t *testing.T) {
	e := StartTestEnvoy(t, EnvoyOptions{Name: "plain", Bootstrap: &bootstrapv3.Bootstrap{Node: &corev3.Node{Id: "n", Cluster: "c"}}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	body, err := e.Admin(ctx, "/ready")
	if err != nil || strings.TrimSpace(string(body)) != "LIVE" {
		t.Errorf("/ready: %q, %v; want LIVE", body, err)
	}
	if _, err := e.Admin(ctx, "/no-such-page"); err == nil || !strings.Contains(err.Error(), "status 404") {
		t.Errorf("/no-such-page: %v, want a 404 error", err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	default:
		t.Error("Envoy still runs after Stop")
	}
	if err := e.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStartEnvoyQuotesExit: an Envoy that refuses its bootstrap fails the
// start with its own words, not a timeout.
func TestStartEnvoyQuotesExit(t *testing.T) {
	bad := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: "n", Cluster: "c"},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{
			GRPCCluster("twice", PipeAddress("/x")), GRPCCluster("twice", PipeAddress("/y")),
		}},
	}
	_, err := StartEnvoy(t.Context(), EnvoyOptions{Binary: TestEnvoyBinary(t), Dir: t.TempDir(), Bootstrap: bad})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "twice") {
		t.Errorf("StartEnvoy on two clusters named twice: %v; want its exit with Envoy's reason", err)
	}
}
