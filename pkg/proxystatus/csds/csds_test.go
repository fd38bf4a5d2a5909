package csds

import (
	"errors"
	"reflect"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/pkg/proxystatus"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func records() []proxystatus.Record {
	return []proxystatus.Record{
		{
			Proxy: "sidecar~10.1.0.7~client.demo~demo.svc.cluster.local", Name: "client.demo",
			Cluster: "cluster-1", Replica: "hub-0", HubVersion: "v0.1.0", Version: "1.85.0",
			Connected: t0, LastChange: t0.Add(2500 * time.Millisecond),
			Types: map[string]proxystatus.TypeStatus{
				"cds": {TypeURL: proxystatus.ClusterTypeURL, Sent: "3", SentNonce: "7", Acked: "3", AckedNonce: "7",
					Status: proxystatus.StatusSynced, SentAt: t0.Add(time.Second), AckedAt: t0.Add(1002 * time.Millisecond)},
				"eds": {TypeURL: proxystatus.EndpointTypeURL, Sent: "9", SentNonce: "12", Acked: "8", AckedNonce: "10",
					Nack: "duplicate endpoint", NackVersion: "9", Status: proxystatus.StatusError,
					SentAt: t0.Add(2 * time.Second), AckedAt: t0.Add(time.Second)},
				"lds": {TypeURL: proxystatus.ListenerTypeURL, Sent: "2", SentNonce: "5",
					Status: proxystatus.StatusStale, SentAt: t0},
				"rds": {TypeURL: proxystatus.RouteTypeURL, Status: proxystatus.StatusNotSent},
				"type.googleapis.com/example.Thing": {TypeURL: "type.googleapis.com/example.Thing", Sent: "1", SentNonce: "1",
					Acked: "1", AckedNonce: "1", Status: proxystatus.StatusSynced},
			},
		},
		{Proxy: "my-grpc-client", Name: "my-grpc-client", Replica: "hub-1", Connected: t0},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, r := range records() {
		got, err := Record(ClientConfig(r))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", r.Proxy, got, r)
		}
	}
}

func TestClientConfigStandardFields(t *testing.T) {
	cc := ClientConfig(records()[0])
	md := cc.GetNode().GetMetadata().GetFields()
	if md[MetadataClusterID].GetStringValue() != "cluster-1" || md[MetadataReplica].GetStringValue() != "hub-0" {
		t.Fatalf("metadata: %v", md)
	}
	if cc.GetNode().GetUserAgentVersion() != "1.85.0" {
		t.Fatalf("version: %v", cc.GetNode())
	}
	byType := map[string]*statusv3.ClientConfig_GenericXdsConfig{}
	var order []string
	for _, g := range cc.GetGenericXdsConfigs() {
		byType[g.GetTypeUrl()] = g
		order = append(order, proxystatus.ShortType(g.GetTypeUrl()))
	}
	if want := []string{"cds", "lds", "eds", "rds", "ecds", "type.googleapis.com/example.Thing"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("types %v, want %v", order, want)
	}
	for _, tc := range []struct {
		url     string
		status  statusv3.ConfigStatus
		client  adminv3.ClientResourceStatus
		version string
	}{
		{proxystatus.ClusterTypeURL, statusv3.ConfigStatus_SYNCED, adminv3.ClientResourceStatus_ACKED, "3"},
		{proxystatus.ListenerTypeURL, statusv3.ConfigStatus_STALE, adminv3.ClientResourceStatus_REQUESTED, ""},
		{proxystatus.EndpointTypeURL, statusv3.ConfigStatus_ERROR, adminv3.ClientResourceStatus_NACKED, "8"},
		{proxystatus.RouteTypeURL, statusv3.ConfigStatus_NOT_SENT, adminv3.ClientResourceStatus_REQUESTED, ""},
		{proxystatus.ExtensionConfigTypeURL, statusv3.ConfigStatus_NOT_SENT, adminv3.ClientResourceStatus_UNKNOWN, ""},
	} {
		g := byType[tc.url]
		if g.GetConfigStatus() != tc.status || g.GetClientStatus() != tc.client || g.GetVersionInfo() != tc.version {
			t.Errorf("%s: %v %v %q, want %v %v %q", tc.url, g.GetConfigStatus(), g.GetClientStatus(), g.GetVersionInfo(),
				tc.status, tc.client, tc.version)
		}
	}
	es := byType[proxystatus.EndpointTypeURL].GetErrorState()
	if es.GetDetails() != "duplicate endpoint" || es.GetVersionInfo() != "9" {
		t.Errorf("error state %v", es)
	}
	for _, g := range cc.GetGenericXdsConfigs() {
		if g.GetXdsConfig() != nil {
			t.Errorf("%s carries resource contents", g.GetTypeUrl())
		}
	}
}

func TestRecordFromForeignServer(t *testing.T) {
	// A CSDS server that knows nothing of meshfed's metadata.
	cc := &statusv3.ClientConfig{
		Node: &corev3.Node{Id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local"},
		GenericXdsConfigs: []*statusv3.ClientConfig_GenericXdsConfig{
			{TypeUrl: proxystatus.ClusterTypeURL, ConfigStatus: statusv3.ConfigStatus_SYNCED, VersionInfo: "1"},
			{TypeUrl: proxystatus.ListenerTypeURL, ConfigStatus: statusv3.ConfigStatus_ERROR,
				ErrorState: &adminv3.UpdateFailureState{Details: "bad"}},
			{TypeUrl: proxystatus.EndpointTypeURL, ConfigStatus: statusv3.ConfigStatus_UNKNOWN},
		},
	}
	r, err := Record(cc)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "a.b" || r.Status("cds") != proxystatus.StatusSynced || r.Status("lds") != proxystatus.StatusError ||
		r.Types["lds"].Nack != "bad" || r.Status("eds") != proxystatus.StatusNotSent || r.Status("rds") != proxystatus.StatusNotSent {
		t.Fatalf("record %+v", r)
	}

	if _, err := Record(&statusv3.ClientConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("no node: %v", err)
	}
	bad := ClientConfig(records()[1])
	bad.Node.Metadata.Fields[MetadataConnected] = structpb.NewStringValue("yesterday")
	if _, err := Record(bad); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad time: %v", err)
	}
}

func metaMatch(key string, vm *matcherv3.ValueMatcher) *matcherv3.StructMatcher {
	return &matcherv3.StructMatcher{Path: []*matcherv3.StructMatcher_PathSegment{
		{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: key}},
	}, Value: vm}
}

func TestMatcher(t *testing.T) {
	exact := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
	}
	prefix := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s}}
	}
	node := ClientConfig(records()[0]).GetNode()
	other := ClientConfig(records()[1]).GetNode()
	for _, tc := range []struct {
		name        string
		ms          []*matcherv3.NodeMatcher
		node, other bool
	}{
		{"none", nil, true, true},
		{"exact", []*matcherv3.NodeMatcher{{NodeId: exact(node.GetId())}}, true, false},
		{"prefix", []*matcherv3.NodeMatcher{{NodeId: prefix("sidecar~")}}, true, false},
		{"suffix ignore case", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "GRPC-CLIENT"}, IgnoreCase: true}}}, false, true},
		{"contains", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "~client.demo~"}}}}, true, false},
		{"regex is anchored", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "grpc"}}}}}, false, false},
		{"regex", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*grpc.*"}}}}}, false, true},
		{"or of matchers", []*matcherv3.NodeMatcher{{NodeId: exact("nope")}, {NodeId: exact("my-grpc-client")}}, false, true},
		{"metadata cluster", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			metaMatch(MetadataClusterID, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: exact("cluster-1")}}),
		}}}, true, false},
		{"metadata present=false", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			metaMatch(MetadataClusterID, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: false}}),
		}}}, false, true},
		{"id and metadata", []*matcherv3.NodeMatcher{{NodeId: prefix("sidecar~"), NodeMetadatas: []*matcherv3.StructMatcher{
			metaMatch(MetadataReplica, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: exact("hub-1")}}),
		}}}, false, false},
		{"or value", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			metaMatch(MetadataReplica, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
				ValueMatchers: []*matcherv3.ValueMatcher{
					{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: exact("hub-0")}},
					{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: exact("hub-1")}},
				}}}}),
		}}}, true, true},
	} {
		m, err := NewMatcher(tc.ms)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := m.Match(node); got != tc.node {
			t.Errorf("%s: Match(%s) = %v", tc.name, node.GetId(), got)
		}
		if got := m.Match(other); got != tc.other {
			t.Errorf("%s: Match(%s) = %v", tc.name, other.GetId(), got)
		}
	}
}

func TestNestedMetadataMatch(t *testing.T) {
	node := ClientConfig(records()[0]).GetNode()
	sm := &matcherv3.StructMatcher{Path: []*matcherv3.StructMatcher_PathSegment{
		{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: MetadataXDS}},
		{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: "eds"}},
		{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: "sent"}},
	}, Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "9"}}}}}
	m, err := NewMatcher([]*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{sm}}})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Match(node) || m.Match(ClientConfig(records()[1]).GetNode()) {
		t.Fatal("nested path")
	}
}

func TestInvalidMatchers(t *testing.T) {
	for name, nm := range map[string]*matcherv3.NodeMatcher{
		"empty string matcher": {NodeId: &matcherv3.StringMatcher{}},
		"bad regex": {NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
			SafeRegex: &matcherv3.RegexMatcher{Regex: "("}}}},
		"empty path": {NodeMetadatas: []*matcherv3.StructMatcher{{}}},
		"no value":   {NodeMetadatas: []*matcherv3.StructMatcher{metaMatch("x", nil)}},
		"custom":     {NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Custom{}}},
	} {
		if _, err := NewMatcher([]*matcherv3.NodeMatcher{nm}); !errors.Is(err, ErrInvalidMatcher) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Response(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{
		{NodeId: &matcherv3.StringMatcher{}},
	}}, records()); !errors.Is(err, ErrInvalidMatcher) {
		t.Fatalf("Response with a bad matcher: %v", err)
	}
}

func TestResponse(t *testing.T) {
	resp, err := Response(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "my-"}},
	}}}, records())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetConfig()) != 1 || resp.GetConfig()[0].GetNode().GetId() != "my-grpc-client" {
		t.Fatalf("response %v", resp)
	}
	all, err := Response(&statusv3.ClientStatusRequest{}, records())
	if err != nil || len(all.GetConfig()) != 2 {
		t.Fatalf("all: %v %v", all, err)
	}
}
