package xds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// fixedRecords is a StatusSource of fixed records.
type fixedRecords []proxystatus.Record

func (r fixedRecords) All() []proxystatus.Record { return r }

var synczT0 = time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)

func syncedType(typeURL, version string, at time.Time) proxystatus.TypeStatus {
	return proxystatus.TypeStatus{
		TypeURL: typeURL, Sent: version, SentNonce: "n" + version, Acked: version, AckedNonce: "n" + version,
		Status: proxystatus.StatusSynced, SentAt: at, AckedAt: at,
	}
}

// fleetRecords: a proxyless client, an Envoy sidecar with a type sent but
// not ACKed, and istioctl's own stream, which subscribed to syncz only.
func fleetRecords() fixedRecords {
	return fixedRecords{
		{
			Proxy: "sidecar~10.1.0.5~client.demo~demo.svc.cluster.local", Name: "client.demo",
			Cluster: "cluster-1", Replica: "hub-0", Version: "1.85.0",
			Types: map[string]proxystatus.TypeStatus{
				"cds": syncedType(proxystatus.ClusterTypeURL, "3", synczT0),
				"lds": syncedType(proxystatus.ListenerTypeURL, "3", synczT0),
				"rds": syncedType(proxystatus.RouteTypeURL, "3", synczT0),
				"eds": syncedType(proxystatus.EndpointTypeURL, "7", synczT0.Add(time.Second)),
			},
		},
		{
			Proxy: "sidecar~10.2.0.9~echo-0.demo~demo.svc.cluster.local", Name: "echo-0.demo",
			Cluster: "cluster-2", Replica: "hub-1", Version: "1.29.0",
			Types: map[string]proxystatus.TypeStatus{
				"cds": syncedType(proxystatus.ClusterTypeURL, "3", synczT0),
				"lds": {TypeURL: proxystatus.ListenerTypeURL, Sent: "4", SentNonce: "n4", Status: proxystatus.StatusStale, SentAt: synczT0.Add(2 * time.Second)},
			},
		},
		{
			Proxy: "sidecar~10.0.0.1~test-1.istio-system~istio-system.svc.cluster.local", Name: "test-1.istio-system",
			Version: "65536.65536.65536",
			Types:   map[string]proxystatus.TypeStatus{DebugSynczType: {TypeURL: DebugSynczType, Sent: "1", SentNonce: "1", Status: proxystatus.StatusStale}},
		},
	}
}

// istioMetadata is what istioctl reads of a ClientConfig's node metadata
// (istio.io/istio/pilot/pkg/model.NodeMetadata, the keys it shows).
type istioMetadata struct {
	ClusterID    string `json:"CLUSTER_ID"`
	Namespace    string `json:"NAMESPACE"`
	IstioVersion string `json:"ISTIO_VERSION"`
}

func metadataOf(t *testing.T, cc *statusv3.ClientConfig) istioMetadata {
	t.Helper()
	b, err := cc.GetNode().GetMetadata().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var md istioMetadata
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatal(err)
	}
	return md
}

type typeRow struct {
	status  statusv3.ConfigStatus
	updated time.Time
}

func typesOfConfig(cc *statusv3.ClientConfig) map[string]typeRow {
	out := map[string]typeRow{}
	for _, g := range cc.GetGenericXdsConfigs() {
		var at time.Time
		if g.GetLastUpdated() != nil {
			at = g.GetLastUpdated().AsTime()
		}
		out[g.GetTypeUrl()] = typeRow{g.GetConfigStatus(), at}
	}
	return out
}

func TestSynczConfigs(t *testing.T) {
	got := map[string]*statusv3.ClientConfig{}
	for _, cc := range synczConfigs(fleetRecords()) {
		got[cc.GetNode().GetId()] = cc
	}
	if len(got) != 2 || got["client.demo"] == nil || got["echo-0.demo"] == nil {
		t.Fatalf("node IDs %v, want client.demo and echo-0.demo (istioctl's own stream left out)", synczKeys(got))
	}

	client := got["client.demo"]
	if md := metadataOf(t, client); md != (istioMetadata{ClusterID: "cluster-1", Namespace: "demo", IstioVersion: "1.85.0"}) {
		t.Errorf("client.demo metadata %+v", md)
	}
	if r := client.GetNode().GetMetadata().GetFields()["MESHFED_REPLICA"].GetStringValue(); r != "hub-0" {
		t.Errorf("client.demo MESHFED_REPLICA %q, want hub-0 (meshfed's CSDS metadata stays)", r)
	}
	wantClient := map[string]typeRow{
		proxystatus.ClusterTypeURL:  {statusv3.ConfigStatus_SYNCED, synczT0},
		proxystatus.ListenerTypeURL: {statusv3.ConfigStatus_SYNCED, synczT0},
		proxystatus.RouteTypeURL:    {statusv3.ConfigStatus_SYNCED, synczT0},
		proxystatus.EndpointTypeURL: {statusv3.ConfigStatus_SYNCED, synczT0.Add(time.Second)},
	}
	if got := typesOfConfig(client); !equalRows(got, wantClient) {
		t.Errorf("client.demo types %v, want only the subscribed %v", got, wantClient)
	}

	echo := got["echo-0.demo"]
	if md := metadataOf(t, echo); md != (istioMetadata{ClusterID: "cluster-2", Namespace: "demo", IstioVersion: "1.29.0"}) {
		t.Errorf("echo-0.demo metadata %+v", md)
	}
	wantEcho := map[string]typeRow{
		proxystatus.ClusterTypeURL: {statusv3.ConfigStatus_SYNCED, synczT0},
		// Never ACKed: last_updated is when it was sent, as istiod says.
		proxystatus.ListenerTypeURL: {statusv3.ConfigStatus_STALE, synczT0.Add(2 * time.Second)},
	}
	if got := typesOfConfig(echo); !equalRows(got, wantEcho) {
		t.Errorf("echo-0.demo types %v, want %v", got, wantEcho)
	}
}

func TestIsDebugClient(t *testing.T) {
	for _, tc := range []struct {
		types []string
		want  bool
	}{
		{[]string{DebugSynczType}, true},
		{[]string{DebugSynczType, DebugTypePrefix + "/config_dump"}, true},
		{[]string{DebugSynczType, "cds"}, false},
		{[]string{"eds"}, false},
		{nil, false},
	} {
		r := proxystatus.Record{Types: map[string]proxystatus.TypeStatus{}}
		for _, k := range tc.types {
			r.Types[k] = proxystatus.TypeStatus{}
		}
		if got := isDebugClient(r); got != tc.want {
			t.Errorf("isDebugClient(%v) = %v, want %v", tc.types, got, tc.want)
		}
	}
}

func equalRows(a, b map[string]typeRow) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.status != w.status || !v.updated.Equal(w.updated) {
			return false
		}
	}
	return true
}

func synczKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// synczRequest is the request istioctl sends (istioctl/pkg/xds and
// pkg/adsc): a node that says GENERATOR=event and a response nonce on the
// first request already.
func synczRequest() *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		TypeUrl:       DebugSynczType,
		ResponseNonce: synczT0.String(),
		Node: &corev3.Node{
			Id: "sidecar~10.0.0.1~test-1.istio-system~istio-system.svc.cluster.local",
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				xdsnode.MetadataGenerator:      structpb.NewStringValue(xdsnode.GeneratorEvent),
				xdsnode.MetadataNamespace:      structpb.NewStringValue("istio-system"),
				xdsnode.MetadataServiceAccount: structpb.NewStringValue("default"),
				xdsnode.MetadataIstioVersion:   structpb.NewStringValue("65536.65536.65536"),
			}},
		},
	}
}

func TestDebugTypesWatch(t *testing.T) {
	d := newDebugTypes(fleetRecords(), "hub-0")
	out := make(chan cachev3.Response, 1)

	t.Run("a request is answered at once, each afresh", func(t *testing.T) {
		var versions []string
		for range 2 {
			if _, err := d.CreateWatch(synczRequest(), nil, out); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-out:
				dr, _ := r.GetDiscoveryResponse()
				if n := len(dr.GetResources()); n != 2 {
					t.Fatalf("%d resources, want 2", n)
				}
				versions = append(versions, dr.GetVersionInfo())
			default:
				t.Fatal("no answer")
			}
		}
		if versions[0] == versions[1] {
			t.Errorf("both answers have version %q", versions[0])
		}
	})

	t.Run("an ACK or NACK is not answered", func(t *testing.T) {
		ack := synczRequest()
		ack.VersionInfo = "1"
		nack := synczRequest()
		nack.ErrorDetail = &rpcstatus.Status{Message: "no"}
		for _, req := range []*discoveryv3.DiscoveryRequest{ack, nack} {
			cancel, err := d.CreateWatch(req, nil, out)
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			select {
			case r := <-out:
				t.Fatalf("answered %v", r.GetRequest())
			default:
			}
		}
	})

	t.Run("a full channel is served once drained; cancel ends the wait", func(t *testing.T) {
		full := make(chan cachev3.Response, 1)
		full <- nil // another type's pending answer
		if _, err := d.CreateWatch(synczRequest(), nil, full); err != nil {
			t.Fatal(err)
		}
		<-full
		select {
		case r := <-full:
			if r == nil || r.GetRequest().GetTypeUrl() != DebugSynczType {
				t.Fatalf("got %v", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the answer never came")
		}

		// Cancelled while the channel stays full, the watch's goroutine
		// ends: a stream that closes leaks nothing.
		before := testutil.CountGoroutines()
		full <- nil
		cancel, err := d.CreateWatch(synczRequest(), nil, full)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		cancel() // cancel may be called again
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
			if grown := testutil.CountGoroutines().GrownSince(before); grown != "" {
				return fmt.Errorf("goroutines left:\n%s", grown)
			}
			return nil
		})
		if r := <-full; r != nil {
			t.Errorf("a cancelled watch answered: %v", r.GetRequest())
		}
	})

	t.Run("other types and Delta are refused", func(t *testing.T) {
		req := synczRequest()
		req.TypeUrl = resourcev3.ClusterType
		if _, err := d.CreateWatch(req, nil, out); err == nil {
			t.Error("CDS watch accepted")
		}
		_, err := d.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: DebugSynczType}, nil, nil)
		if !errors.Is(err, ErrDebugDelta) {
			t.Errorf("Delta watch: %v, want ErrDebugDelta", err)
		}
	})
}

// debugOnlyCache is a tiny cache for a real stream server: debug types go
// to debugTypes, clusters to a LinearCache, the rest is refused.
type debugOnlyCache struct {
	debug    *debugTypes
	clusters *cachev3.LinearCache
}

func (c *debugOnlyCache) pick(typeURL string) (cachev3.ConfigWatcher, error) {
	switch {
	case IsDebugType(typeURL):
		return c.debug, nil
	case typeURL == resourcev3.ClusterType:
		return c.clusters, nil
	}
	return nil, fmt.Errorf("type %q is not served", typeURL)
}

func (c *debugOnlyCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	w, err := c.pick(req.GetTypeUrl())
	if err != nil {
		return nil, err
	}
	return w.CreateWatch(req, sub, out)
}

func (c *debugOnlyCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	w, err := c.pick(req.GetTypeUrl())
	if err != nil {
		return nil, err
	}
	return w.CreateDeltaWatch(req, sub, out)
}

func (c *debugOnlyCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("no REST")
}

// TestSynczOverADS: through go-control-plane's stream server, a proxy's
// CDS stream is tracked by a real StatusTracker, and istioctl's request
// gets that proxy, not itself, with istiod's control plane identifier;
// asking again on the stream gets a fresh answer.
func TestSynczOverADS(t *testing.T) {
	tracker := NewStatusTracker("hub-0", clocktesting.NewFakeClock(synczT0), nil)
	clusters := cachev3.NewLinearCache(resourcev3.ClusterType, cachev3.WithInitialResources(map[string]types.Resource{
		"outbound|8080||echo.demo.svc.cluster.local": &clusterv3.Cluster{Name: "outbound|8080||echo.demo.svc.cluster.local"},
	}))
	cache := &debugOnlyCache{debug: newDebugTypes(tracker, "hub-0"), clusters: clusters}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, ads.NewServer(t.Context(), cache, tracker.Handler()))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	addr := lis.Addr().String()

	proxy := newADS(t, addr, "cluster-1", "r1")
	proxy.subscribe(resourcev3.ClusterType) // and ACK it

	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, r := range tracker.Records() {
			if r.Name == "client.demo" && r.Status(proxystatus.TypeCDS) == proxystatus.StatusSynced {
				return nil
			}
		}
		return errors.New("the proxy's CDS ACK is not tracked yet")
	})

	ctl := newADS(t, addr, "", "")
	ask := func(nonce string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		req := synczRequest()
		req.ResponseNonce = nonce
		if err := ctl.stream.Send(req); err != nil {
			t.Fatal(err)
		}
		return ctl.recv()
	}
	first := ask(synczT0.String()) // istioctl's first request carries a nonce already
	ccs := decodeConfigs(t, first)
	if len(ccs) != 1 || ccs[0].GetNode().GetId() != "client.demo" {
		t.Fatalf("answer lists %v, want client.demo alone", nodeIDs(ccs))
	}
	if md := metadataOf(t, ccs[0]); md != (istioMetadata{ClusterID: "cluster-1", Namespace: "demo"}) {
		t.Errorf("client.demo metadata %+v", md)
	}
	if st := typesOfConfig(ccs[0])[resourcev3.ClusterType].status; st != statusv3.ConfigStatus_SYNCED {
		t.Errorf("client.demo CDS is %v, want SYNCED", st)
	}
	if first.GetTypeUrl() != DebugSynczType {
		t.Errorf("type %q", first.GetTypeUrl())
	}
	var cp struct {
		Component, ID, Replica string
		Info                   struct {
			GolangVersion string `json:"golang_version"`
		}
	}
	if err := json.Unmarshal([]byte(first.GetControlPlane().GetIdentifier()), &cp); err != nil ||
		cp.ID != ControlPlaneID || cp.Replica != "hub-0" || cp.Info.GolangVersion == "" {
		t.Errorf("control plane identifier %q (%v): want ID %s, replica hub-0 and the build", first.GetControlPlane().GetIdentifier(), err, ControlPlaneID)
	}

	again := ask(first.GetNonce())
	if again.GetVersionInfo() == first.GetVersionInfo() {
		t.Errorf("second answer has the first's version %q", again.GetVersionInfo())
	}
	if n := len(again.GetResources()); n != 1 {
		t.Errorf("second answer has %d resources, want 1", n)
	}
}

func decodeConfigs(t *testing.T, r *discoveryv3.DiscoveryResponse) []*statusv3.ClientConfig {
	t.Helper()
	var out []*statusv3.ClientConfig
	for _, a := range r.GetResources() {
		cc := &statusv3.ClientConfig{}
		if err := a.UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		out = append(out, cc)
	}
	return out
}

func nodeIDs(ccs []*statusv3.ClientConfig) []string {
	var out []string
	for _, cc := range ccs {
		out = append(out, cc.GetNode().GetId())
	}
	return out
}
