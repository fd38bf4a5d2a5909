package xds

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// serveReplica runs a Server named replica over st and returns it.
func serveReplica(t *testing.T, st *store.Store, replica string) *Server {
	t.Helper()
	return runServer(t, Options{Registry: st, Replica: replica})
}

func csdsClient(t *testing.T, addr string) statusv3.ClientStatusDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return statusv3.NewClientStatusDiscoveryServiceClient(cc)
}

func fetch(t *testing.T, c statusv3.ClientStatusDiscoveryServiceClient, ms ...*matcherv3.NodeMatcher) (map[string]*statusv3.ClientConfig, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: ms})
	if err != nil {
		return nil, err
	}
	out := map[string]*statusv3.ClientConfig{}
	for _, cc := range resp.GetConfig() {
		out[cc.GetNode().GetId()] = cc
	}
	return out, nil
}

func generic(cc *statusv3.ClientConfig, typeURL string) *statusv3.ClientConfig_GenericXdsConfig {
	for _, g := range cc.GetGenericXdsConfigs() {
		if g.GetTypeUrl() == typeURL {
			return g
		}
	}
	return nil
}

// nack rejects response r with msg.
func (a *adsClient) nack(r *discoveryv3.DiscoveryResponse, lastGood, msg string, names ...string) {
	a.t.Helper()
	if err := a.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: a.node, TypeUrl: r.GetTypeUrl(), ResourceNames: names, VersionInfo: lastGood, ResponseNonce: r.GetNonce(),
		ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: msg},
	}); err != nil {
		a.t.Fatal(err)
	}
}

const otherID = "sidecar~10.0.0.2~other.demo~demo.svc.cluster.local"

// TestCSDS: a raw ADS client ACKs CDS and LDS and NACKs EDS; CSDS reports
// SYNCED, ERROR with the proxy's message, and NOT SENT for what it never
// asked for; node matchers filter; a closed stream takes the proxy away.
func TestCSDS(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	srv := serveReplica(t, st, "hub-0")
	addr := srv.Addr().String()
	listener := xdsgen.ListenerName(echo, 8080)
	cluster := xdsgen.ClusterName(echo, 8080)

	a := newADS(t, addr, "c1", "r1")
	a.subscribe(resourcev3.ClusterType, cluster)
	a.subscribe(resourcev3.ListenerType, listener)
	a.request(resourcev3.EndpointType, "", "", cluster)
	eds := a.recv()
	const nackMsg = "cluster outbound|8080||echo.demo.svc.cluster.local: no healthy priority"
	a.nack(eds, "", nackMsg, cluster)

	b := newADS(t, addr, "c2", "r2")
	b.node.Id = otherID
	b.request(resourcev3.ClusterType, "", "", cluster)
	cdsB := b.recv() // sent, not ACKed: STALE

	c := csdsClient(t, addr)
	var got map[string]*statusv3.ClientConfig
	waitUntil(t, "CSDS shows the ACKs and the NACK", func() error {
		var err error
		if got, err = fetch(t, c); err != nil {
			return err
		}
		if len(got) != 2 {
			return fmt.Errorf("%d proxies", len(got))
		}
		cc := got[a.node.GetId()]
		if s := generic(cc, resourcev3.ClusterType).GetConfigStatus(); s != statusv3.ConfigStatus_SYNCED {
			return fmt.Errorf("cds %v", s)
		}
		if s := generic(cc, resourcev3.ListenerType).GetConfigStatus(); s != statusv3.ConfigStatus_SYNCED {
			return fmt.Errorf("lds %v", s)
		}
		if s := generic(cc, resourcev3.EndpointType).GetConfigStatus(); s != statusv3.ConfigStatus_ERROR {
			return fmt.Errorf("eds %v", s)
		}
		return nil
	})

	cc := got[a.node.GetId()]
	md := cc.GetNode().GetMetadata().GetFields()
	if md[csds.MetadataClusterID].GetStringValue() != "c1" || md[csds.MetadataReplica].GetStringValue() != "hub-0" {
		t.Errorf("node metadata %v", md)
	}
	cds := generic(cc, resourcev3.ClusterType)
	if cds.GetClientStatus() != adminv3.ClientResourceStatus_ACKED || cds.GetVersionInfo() == "" || cds.GetErrorState() != nil {
		t.Errorf("cds %v", cds)
	}
	e := generic(cc, resourcev3.EndpointType)
	if e.GetClientStatus() != adminv3.ClientResourceStatus_NACKED || e.GetErrorState().GetDetails() != nackMsg ||
		e.GetErrorState().GetVersionInfo() != eds.GetVersionInfo() {
		t.Errorf("eds %v", e)
	}
	for _, url := range []string{resourcev3.RouteType, proxystatus.ExtensionConfigTypeURL} {
		g := generic(cc, url)
		if g.GetConfigStatus() != statusv3.ConfigStatus_NOT_SENT || g.GetClientStatus() != adminv3.ClientResourceStatus_UNKNOWN {
			t.Errorf("unrequested %s: %v", url, g)
		}
	}
	if s := generic(got[otherID], resourcev3.ClusterType); s.GetConfigStatus() != statusv3.ConfigStatus_STALE ||
		s.GetClientStatus() != adminv3.ClientResourceStatus_REQUESTED {
		t.Errorf("unACKed cds: %v", s)
	}

	// The records the CLI rebuilds say the same.
	rec, err := csds.Record(cc)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Name != "client.demo" || rec.Replica != "hub-0" || rec.Types["eds"].Nack != nackMsg ||
		rec.Status("cds") != proxystatus.StatusSynced || rec.Status("rds") != proxystatus.StatusNotSent {
		t.Errorf("record %+v", rec)
	}

	// Node matchers.
	exact := &matcherv3.NodeMatcher{NodeId: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_Exact{Exact: otherID}}}
	if got, err := fetch(t, c, exact); err != nil || len(got) != 1 || got[otherID] == nil {
		t.Errorf("exact matcher: %v %v", got, err)
	}
	prefix := &matcherv3.NodeMatcher{NodeId: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "sidecar~10.0.0."}}}
	if got, err := fetch(t, c, prefix); err != nil || len(got) != 2 {
		t.Errorf("prefix matcher: %v %v", got, err)
	}
	none := &matcherv3.NodeMatcher{NodeId: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "router~"}}}
	if got, err := fetch(t, c, none); err != nil || len(got) != 0 {
		t.Errorf("matching nothing: %v %v", got, err)
	}
	bad := &matcherv3.NodeMatcher{NodeId: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "("}}}}
	if _, err := fetch(t, c, bad); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("bad matcher: %v", err)
	}

	// The streaming RPC answers each request.
	stream, err := c.StreamClientStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*matcherv3.NodeMatcher{exact, prefix} {
		if err := stream.Send(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{m}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want := map[*matcherv3.NodeMatcher]int{exact: 1, prefix: 2}[m]; len(resp.GetConfig()) != want {
			t.Errorf("stream: %d configs, want %d", len(resp.GetConfig()), want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// b ACKs: SYNCED.
	b.request(resourcev3.ClusterType, cdsB.GetVersionInfo(), cdsB.GetNonce(), cluster)
	waitUntil(t, "b's ACK", func() error {
		got, err := fetch(t, c, exact)
		if err != nil {
			return err
		}
		if s := generic(got[otherID], resourcev3.ClusterType).GetConfigStatus(); s != statusv3.ConfigStatus_SYNCED {
			return fmt.Errorf("cds %v", s)
		}
		return nil
	})

	// b's stream closes: it leaves Records and CSDS.
	if err := b.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "closed stream removed", func() error {
		for _, r := range srv.Status().Records() {
			if r.Proxy == otherID {
				return errors.New("still in Records")
			}
		}
		got, err := fetch(t, c)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[otherID] != nil {
			return fmt.Errorf("CSDS lists %d proxies", len(got))
		}
		return nil
	})
}

// TestCSDSFleetSource: with the hub's fleet as source, CSDS reports
// proxies of every replica, each under the replica serving it.
func TestCSDSFleetSource(t *testing.T) {
	fleet := proxystatus.NewFleet()
	fleet.Upsert("hub-1", []proxystatus.Record{{Proxy: otherID, Name: "other.demo", Cluster: "c2",
		Connected: time.Now(), Types: map[string]proxystatus.TypeStatus{
			"eds": {TypeURL: resourcev3.EndpointType, Sent: "3", SentNonce: "3", Acked: "3", AckedNonce: "3", Status: proxystatus.StatusSynced},
		}}})
	st := store.New(store.Options{Self: "test"})
	srv := runServer(t, Options{Registry: st, Replica: "hub-0", StatusSource: fleet})
	addr := srv.Addr().String()
	a := newADS(t, addr, "c1", "r1")
	a.request(resourcev3.ClusterType, "", "", "x")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Status().Drain(ctx, func(changed []proxystatus.Record, removed []string) {
		fleet.Upsert("hub-0", changed)
		fleet.Remove("hub-0", removed)
	})

	c := csdsClient(t, addr)
	waitUntil(t, "both replicas' proxies", func() error {
		got, err := fetch(t, c)
		if err != nil {
			return err
		}
		if len(got) != 2 {
			return fmt.Errorf("%d proxies", len(got))
		}
		for id, replica := range map[string]string{a.node.GetId(): "hub-0", otherID: "hub-1"} {
			if r := got[id].GetNode().GetMetadata().GetFields()[csds.MetadataReplica].GetStringValue(); r != replica {
				return fmt.Errorf("%s on %q, want %q", id, r, replica)
			}
		}
		if s := generic(got[otherID], resourcev3.EndpointType).GetConfigStatus(); s != statusv3.ConfigStatus_SYNCED {
			return fmt.Errorf("remote eds %v", s)
		}
		return nil
	})
}

// TestServerTracker: a tracker given in Options is the one the streams
// feed (the hub builds it first, for its fleet status to read).
func TestServerTracker(t *testing.T) {
	tr := xdsstatus.NewTracker("hub-0", nil, nil)
	srv := runServer(t, Options{Registry: store.New(store.Options{Self: "test"}), Replica: "hub-0", Tracker: tr})
	if srv.Status() != tr {
		t.Fatal("the server made a tracker of its own")
	}
	a := newADS(t, srv.Addr().String(), "c1", "r1")
	a.request(resourcev3.ClusterType, "", "", "x")
	waitUntil(t, "the proxy in the given tracker", func() error {
		for _, r := range tr.Records() {
			if r.Proxy == a.node.GetId() {
				return nil
			}
		}
		return errors.New("not in the tracker")
	})
}

// TestCSDSDelta: a Delta client's ACK and NACK reach CSDS through the real
// stream server.
func TestCSDSDelta(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	srv := serveReplica(t, st, "hub-0")
	addr := srv.Addr().String()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := newADS(t, addr, "c1", "r1").node
	node.Id = otherID
	cluster := xdsgen.ClusterName(echo, 8080)
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
			Node: node, TypeUrl: typ, ResourceNamesSubscribe: []string{cluster},
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}
		if r.GetTypeUrl() == resourcev3.EndpointType {
			req.ErrorDetail = &status.Status{Message: "rejected by test"}
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	c := csdsClient(t, addr)
	waitUntil(t, "delta ACK and NACK", func() error {
		got, err := fetch(t, c)
		if err != nil {
			return err
		}
		r, err := csds.Record(got[otherID])
		if err != nil {
			return err
		}
		if r.Status("cds") != proxystatus.StatusSynced || r.Status("eds") != proxystatus.StatusError ||
			r.Types["eds"].Nack != "rejected by test" || r.Types["cds"].Acked == "" {
			return fmt.Errorf("record %+v", r)
		}
		return nil
	})
}

// waitUntil waits (bounded) for cond to hold, naming what in a failure.
func waitUntil(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, testutil.Named(what, cond))
}
