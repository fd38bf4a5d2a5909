package csds

import (
	"testing"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzRecord: whatever a CSDS server answers, Record returns an error or a
// record that survives a second round trip.
func FuzzRecord(f *testing.F) {
	for _, r := range records() {
		b, err := proto.Marshal(ClientConfig(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cc statusv3.ClientConfig
		if proto.Unmarshal(b, &cc) != nil {
			return
		}
		r, err := Record(&cc)
		if err != nil {
			return
		}
		if r.Proxy == "" {
			t.Fatal("record without a proxy")
		}
		again, err := Record(ClientConfig(r))
		if err != nil {
			t.Fatalf("round trip of %+v: %v", r, err)
		}
		if again.Proxy != r.Proxy || len(again.Types) != len(r.Types) {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}

// FuzzResponse: whatever node matchers a client sends, Response answers or
// refuses without panicking, and never returns a node that matches none.
func FuzzResponse(f *testing.F) {
	seed := &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "sidecar~"}},
		NodeMetadatas: []*matcherv3.StructMatcher{metaMatch(MetadataClusterID, &matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "cluster-[0-9]+"}}}}})},
	}}}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	recs := records()
	f.Fuzz(func(t *testing.T, b []byte) {
		var req statusv3.ClientStatusRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := Response(&req, recs)
		if err != nil {
			return
		}
		if len(resp.GetConfig()) > len(recs) {
			t.Fatalf("%d configs from %d records", len(resp.GetConfig()), len(recs))
		}
		if len(req.GetNodeMatchers()) == 0 && len(resp.GetConfig()) != len(recs) {
			t.Fatal("no matchers did not match everything")
		}
	})
}
