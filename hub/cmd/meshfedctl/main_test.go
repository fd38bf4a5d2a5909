package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/go-logr/logr/testr"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// parseArgs parses a command line (without the program name) into
// Options without carrying it out: what tests of the flags use.
func parseArgs(args []string, stderr io.Writer) (Options, error) {
	var got Options
	var ran bool
	root := newRootCommand(func(_ context.Context, o Options, _ io.Writer) error {
		got, ran = o, true
		return nil
	}, io.Discard, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return got, err
	}
	if !ran {
		return got, errNoCommand
	}
	return got, nil
}

// errNoCommand is parseArgs' answer to a line that runs no command (help).
var errNoCommand = errors.New("no command run")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got)
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options
		err  bool
	}{
		{args: []string{"proxy-status"}, want: func() Options {
			o := DefaultOptions()
			o.Command = cmdProxyStatus
			return o
		}()},
		{args: []string{"proxy-status", "client.demo", "-o", "json", "--hub", "hub:1"}, want: func() Options {
			o := DefaultOptions()
			o.Command, o.Proxy, o.Output, o.Hub = cmdProxyStatus, "client.demo", outputJSON, "hub:1"
			return o
		}()},
		{args: []string{"remote-clusters", "--monitoring=h:2", "--output", "yaml", "--timeout", "3s"}, want: func() Options {
			o := DefaultOptions()
			o.Command, o.Monitoring, o.Output, o.Timeout = cmdRemoteClusters, "h:2", outputYAML, 3*time.Second
			return o
		}()},
		{args: []string{"istio-config", "-n", "mesh", "--context", "prod", "--kubeconfig", "k.yaml", "vs/demo/echo"}, want: func() Options {
			o := DefaultOptions()
			o.Command, o.Object, o.Kube = cmdIstioConfig, "vs/demo/echo", kubeconfigFlags{Kubeconfig: "k.yaml", Context: "prod", Namespace: "mesh"}
			return o
		}()},
		{args: []string{"version", "--client"}, want: func() Options {
			o := DefaultOptions()
			o.Command = cmdVersion
			return o
		}()},
		{args: []string{"version"}, want: func() Options {
			o := DefaultOptions()
			o.Command, o.FleetVersions = cmdVersion, true
			return o
		}()},
		{args: []string{"trust-bundle", "-o", "pem"}, want: func() Options {
			o := DefaultOptions()
			o.Command, o.Output = cmdTrustBundle, outputPEM
			return o
		}()},
		{args: []string{"proxy-status", "a", "b"}, err: true},
		{args: []string{"proxy-status", "-o", "pem"}, err: true},
		{args: []string{"remote-clusters", "x"}, err: true},
		{args: []string{"remote-clusters", "--hub", "x:1"}, err: true},
		{args: []string{"explain", "only-proxy"}, err: true},
		{args: []string{"create-remote-secret"}, err: true},
		{args: []string{"frobnicate"}, err: true},
		{args: []string{"help"}, err: true},
		{args: nil, err: true},
	} {
		got, err := parseArgs(tc.args, io.Discard)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error", tc.args)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

// TestHelpAndCompletion: every command has its --help, and the shells get
// completion scripts, as cobra's commands do.
func TestHelpAndCompletion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"proxy-status", "--help"}, {"explain", "--help"}, {"completion", "bash"}, {"completion", "zsh"}} {
		var out bytes.Buffer
		root := newRootCommand(func(context.Context, Options, io.Writer) error { return errors.New("ran") }, &out, io.Discard)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Errorf("%q: %v", args, err)
		}
		if out.Len() == 0 {
			t.Errorf("%q printed nothing", args)
		}
	}
}

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// fleetRecords are proxies of two replicas.
func fleetRecords() map[string][]proxystatus.Record {
	synced := func(url, v string) proxystatus.TypeStatus {
		return proxystatus.TypeStatus{TypeURL: url, Sent: v, SentNonce: v, Acked: v, AckedNonce: v,
			Status: proxystatus.StatusSynced, SentAt: t0.Add(time.Second), AckedAt: t0.Add(1010 * time.Millisecond)}
	}
	return map[string][]proxystatus.Record{
		"hub-0": {{
			Proxy: "sidecar~10.1.0.7~client-5f6d.demo~demo.svc.cluster.local", Name: "client-5f6d.demo",
			Cluster: "cluster-1", Version: "1.85.0", Connected: t0, LastChange: t0.Add(3 * time.Second),
			Types: map[string]proxystatus.TypeStatus{
				"cds": synced(proxystatus.ClusterTypeURL, "3"),
				"lds": synced(proxystatus.ListenerTypeURL, "2"),
				"rds": synced(proxystatus.RouteTypeURL, "2"),
				"eds": {TypeURL: proxystatus.EndpointTypeURL, Sent: "9", SentNonce: "12", Acked: "8", AckedNonce: "10",
					Nack:        "cluster outbound|8080||echo.demo.svc.cluster.local: duplicate endpoint 10.2.0.4:9000",
					NackVersion: "9", Status: proxystatus.StatusError, SentAt: t0.Add(3 * time.Second), AckedAt: t0.Add(2 * time.Second)},
			},
		}},
		"hub-1": {
			{
				Proxy: "sidecar~10.2.0.9~client-5f6d.demo~demo.svc.cluster.local", Name: "client-5f6d.demo",
				Cluster: "cluster-2", Version: "1.85.0", Connected: t0, LastChange: t0.Add(2 * time.Second),
				Types: map[string]proxystatus.TypeStatus{
					"cds": synced(proxystatus.ClusterTypeURL, "3"),
					"lds": synced(proxystatus.ListenerTypeURL, "2"),
					"eds": {TypeURL: proxystatus.EndpointTypeURL, Sent: "10", SentNonce: "9", Acked: "9", AckedNonce: "8",
						Status: proxystatus.StatusStale, SentAt: t0.Add(2 * time.Second), AckedAt: t0.Add(time.Second)},
				},
			},
			{
				Proxy: "sidecar~10.1.0.3~api-0.shop~shop.svc.cluster.local", Name: "api-0.shop",
				Cluster: "cluster-1", Version: "1.28.1", Connected: t0, LastChange: t0.Add(time.Second),
				Types: map[string]proxystatus.TypeStatus{
					"cds": synced(proxystatus.ClusterTypeURL, "3"),
					"lds": synced(proxystatus.ListenerTypeURL, "2"),
					"rds": synced(proxystatus.RouteTypeURL, "2"),
					"eds": synced(proxystatus.EndpointTypeURL, "8"),
				},
			},
		},
	}
}

// serveHub runs a real xDS server (CSDS on the same port) whose status
// source is a fleet holding fleetRecords plus this replica's own proxies.
func serveHub(t *testing.T) (addr string, fleet *proxystatus.Fleet) {
	t.Helper()
	st := store.New(store.Options{Self: "hub-0"})
	fleet = proxystatus.NewFleet()
	for replica, recs := range fleetRecords() {
		fleet.Upsert(replica, recs)
	}
	srv := xds.New(xds.Options{Addr: "127.0.0.1:0", Registry: st, Log: testr.New(t), Replica: "hub-2", StatusSource: fleet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Run(ctx) }()
	go func() {
		srv.Status().Drain(ctx, func(changed []proxystatus.Record, removed []string) {
			fleet.Upsert("hub-2", changed)
			fleet.Remove("hub-2", removed)
		})
		done <- nil
	}()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("hub: %v", err)
			}
		}
	})
	return srv.Addr().String(), fleet
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	opts, err := parseArgs(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(context.Background(), opts, &out)
	return out.String(), err
}

func TestProxyStatus(t *testing.T) {
	addr, _ := serveHub(t)

	out, err := runCLI(t, "proxy-status", "--hub", addr)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "proxy_status.golden", []byte(out))

	out, err = runCLI(t, "proxy-status", "--hub", addr, "sidecar~10.1.0.3~api-0.shop~shop.svc.cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "proxy_status_detail.golden", []byte(out))

	// A name in two clusters: both, the NACK message included.
	out, err = runCLI(t, "proxy-status", "client-5f6d.demo", "--hub", addr)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "proxy_status_detail_two.golden", []byte(out))

	_, err = runCLI(t, "proxy-status", "--hub", addr, "nobody.nowhere")
	if !errors.Is(err, errUnknownProxy) || !strings.Contains(err.Error(), `"nobody.nowhere"`) {
		t.Fatalf("unknown proxy: %v", err)
	}
	// A substring of a name is not a name.
	if _, err = runCLI(t, "proxy-status", "--hub", addr, "api-0"); !errors.Is(err, errUnknownProxy) {
		t.Fatalf("partial name: %v", err)
	}
}

func TestProxyStatusJSON(t *testing.T) {
	addr, _ := serveHub(t)
	out, err := runCLI(t, "proxy-status", "--hub", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc proxystatus.JSONDocument
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var want []proxystatus.Record
	for replica, recs := range fleetRecords() {
		for _, r := range recs {
			r.Replica = replica
			want = append(want, r)
		}
	}
	proxystatus.Sort(want)
	if !reflect.DeepEqual(doc.Proxies, want) {
		t.Fatalf("JSON:\n got %+v\nwant %+v", doc.Proxies, want)
	}

	out, err = runCLI(t, "proxy-status", "--hub", addr, "-o", "json", "api-0.shop")
	if err != nil {
		t.Fatal(err)
	}
	doc = proxystatus.JSONDocument{}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Proxies) != 1 || doc.Proxies[0].Name != "api-0.shop" {
		t.Fatalf("one proxy as JSON: %v %+v", err, doc)
	}
}

// TestProxyStatusLiveNACK: a proxy connected to the hub NACKs; the detail
// shows its message.
func TestProxyStatusLiveNACK(t *testing.T) {
	addr, _ := serveHub(t)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: xdsnode.SidecarID("10.3.0.1", "live-0", "demo", "cluster.local"),
		Metadata: xdsnode.Metadata{ClusterID: "cluster-3"}.Struct()}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: r.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "unknown lb policy"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		out, err := runCLI(t, "proxy-status", "--hub", addr, "live-0.demo")
		if err == nil && strings.Contains(out, "cds: version "+r.GetVersionInfo()+" rejected: unknown lb policy") &&
			strings.Contains(out, "HUB:           hub-2") {
			return nil
		}
		return fmt.Errorf("detail never showed the NACK: %v\n%s", err, out)
	})
}

// monitoringServer serves /debug/registryz and, if fed is set,
// /debug/federationz, encoded from the types the hub serves (debugdoc's).
func monitoringServer(t *testing.T, fed *debugdoc.Federationz) string {
	t.Helper()
	reg := debugdoc.Registryz{
		Replica: "hub-0",
		Clusters: []debugdoc.RegistryzCluster{
			{ID: "cluster-1", Secret: "istio-system/remote-1", State: debugdoc.ClusterSynced, Generation: 4, Services: 12, Endpoints: 48,
				Since: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), StalePolicy: "keep", DiscoverySelector: "mesh=on"},
			{ID: "cluster-2", Secret: "istio-system/remote-1", State: debugdoc.ClusterReplicated, Services: 3, Endpoints: 6, Network: "network-2"},
			{ID: "cluster-3", Secret: "istio-system/remote-3", State: debugdoc.ClusterUnreachable,
				Since: time.Date(2026, 12, 3, 9, 58, 0, 0, time.UTC), StalePolicy: "drop-after=30s", EndpointsDropped: time.Date(2026, 12, 3, 9, 58, 30, 0, time.UTC),
				Error: "Get \"https://10.9.0.1:6443/api\":\n dial tcp 10.9.0.1:6443: i/o timeout"},
			{ID: "cluster-4", Secret: "istio-system/remote-4", State: debugdoc.ClusterInvalid, Error: "kubeconfig uses an exec plugin"},
		},
		SecretErrors: []debugdoc.SecretError{{Secret: "istio-system/broken", Error: "no clusters in secret"}},
		Networks: &model.NetworkGateways{
			Networks: []model.Network{"network-1", "network-2"},
			ByNetwork: map[model.Network][]model.GatewayAddress{"network-2": {{Cluster: "cluster-2",
				Service: "istio-eastwestgateway.istio-system.svc.cluster.local", Address: netip.MustParseAddr("203.0.113.7"), Port: 15443}}},
			Problems: []model.NetworkProblem{{Network: "network-1", Cluster: "cluster-1", Service: "istio-eastwestgateway.istio-system.svc.cluster.local",
				Reason: model.ProblemNoAddress, Message: "no address in status.loadBalancer.ingress or spec.externalIPs"}},
		},
	}
	reg.Clusters[0].Network = "network-1"
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Error(err)
		}
	}
	mux.HandleFunc("GET "+debugdoc.RegistryzPath, func(w http.ResponseWriter, _ *http.Request) { write(w, reg) })
	if fed != nil {
		mux.HandleFunc("GET "+debugdoc.FederationzPath, func(w http.ResponseWriter, _ *http.Request) { write(w, fed) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func federationzFixture() *debugdoc.Federationz {
	return &debugdoc.Federationz{
		Self: "hub-0", WatchReplicas: 1,
		Members: []debugdoc.FederationzMember{{ID: "hub-0", Connected: true}, {ID: "hub-1", Connected: true}},
		Clusters: []debugdoc.FederationzCluster{
			{ID: "cluster-1", Owners: []string{"hub-0"}, Version: debugdoc.StateVersion{Term: 1, Seq: 9, Owner: "hub-0"}},
			{ID: "cluster-2", Owners: []string{"hub-1", "hub-0"}},
			{ID: "cluster-3", Owners: []string{"hub-1"}},
		},
	}
}

func TestRemoteClusters(t *testing.T) {
	url := monitoringServer(t, federationzFixture())
	out, err := runCLI(t, "remote-clusters", "--monitoring", url)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "remote_clusters.golden", []byte(out))

	// Without federationz: OWNERS unknown.
	url = monitoringServer(t, nil)
	out, err = runCLI(t, "remote-clusters", "--monitoring", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "remote_clusters_no_federation.golden", []byte(out))
}

func TestRemoteClustersJSON(t *testing.T) {
	for _, fed := range []*debugdoc.Federationz{federationzFixture(), nil} {
		url := monitoringServer(t, fed)
		out, err := runCLI(t, "remote-clusters", "--monitoring", url, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var doc remoteClustersDoc
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if doc.Replica != "hub-0" || len(doc.Clusters) != 4 || len(doc.SecretErrors) != 1 {
			t.Fatalf("doc %+v", doc)
		}
		c := doc.Clusters[1]
		if c.Cluster != "cluster-2" || c.State != "replicated" || c.Services != 3 || c.Endpoints != 6 {
			t.Fatalf("cluster-2: %+v", c)
		}
		var wantOwners []string
		if fed != nil {
			wantOwners = []string{"hub-1", "hub-0"}
		}
		if !reflect.DeepEqual(c.Owners, wantOwners) {
			t.Fatalf("owners %v, want %v", c.Owners, wantOwners)
		}
		if c := doc.Clusters[2]; c.StalePolicy != "drop-after=30s" || c.Since.IsZero() || !c.EndpointsDropped.Equal(time.Date(2026, 12, 3, 9, 58, 30, 0, time.UTC)) {
			t.Fatalf("cluster-3's staleness: %+v", c)
		}
		if c := doc.Clusters[0]; c.DiscoverySelector != "mesh=on" {
			t.Fatalf("cluster-1's discovery selector: %+v", c)
		}
	}
}

func TestRemoteClustersErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv.URL); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("500: %v", err)
	}
	srv404 := httptest.NewServer(http.NotFoundHandler())
	defer srv404.Close()
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv404.URL); !errors.Is(err, errNotFound) {
		t.Fatalf("404: %v", err)
	}
}

// TestMonitoringToken: the monitoring-port commands send --token-file's
// token, or with --kubeconfig-token the kubeconfig's current user's, as a
// bearer token; the hub's 401 is reported with its status.
func TestMonitoringToken(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") == "" {
			http.Error(w, "Unauthorized: no credentials", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(debugdoc.Registryz{Replica: "hub-0"})
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver.example:6443"}}]
users: [{name: u, user: {token: kube-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv.URL, "--token-file", tokenFile); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv.URL, "--kubeconfig-token"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv.URL); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without a token: %v, want the 401", err)
	}
	if len(seen) < 3 || seen[0] != "Bearer file-token" || !slices.Contains(seen, "Bearer kube-token") {
		t.Errorf("Authorization headers sent: %q", seen)
	}
	if _, err := runCLI(t, "remote-clusters", "--monitoring", srv.URL, "--kubeconfig-token", "--token", "x"); err == nil {
		t.Error("--kubeconfig-token with --token was accepted")
	}
}
