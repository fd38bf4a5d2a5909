package xdsstatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

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
	d := NewDebugTypes(fleetRecords(), "hub-0")
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
