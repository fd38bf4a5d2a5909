package xdsgen

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// entrySeeds are ServiceEntry specs of every resolution and location,
// with odd ports and names.
var entrySeeds = []string{
	`{"hosts":["api.ext.test"],"ports":[{"number":443,"name":"https","protocol":"HTTPS"},{"number":80,"name":"http","protocol":"HTTP","targetPort":65535}],"resolution":"STATIC","endpoints":[{"address":"10.9.0.1","ports":{"http":1}},{"address":"fd00::9","locality":"r/z/s","labels":{"security.istio.io/tlsMode":"istio"}}]}`,
	`{"hosts":["db.ext.test","db2.ext.test"],"location":"MESH_INTERNAL","ports":[{"number":5432,"name":"tcp","protocol":"TCP"}],"resolution":"DNS","endpoints":[{"address":"db-1.ext.test","weight":4294967295},{"address":"db-2.ext.test","locality":"r2"}]}`,
	`{"hosts":["self.ext.test"],"ports":[{"number":9000,"name":"grpc","protocol":"GRPC"}],"resolution":"DNS_ROUND_ROBIN"}`,
	`{"hosts":["*.wild.test"],"ports":[{"number":443,"name":"tls","protocol":"TLS"}],"resolution":"NONE"}`,
}

// FuzzServiceEntryClusters: whatever valid ServiceEntry comes in, the
// services its hosts become give both proxy kinds clusters that pass
// Envoy's validation (and, for proxyless, grpc-go's rules), load
// assignments that do, and notes without panicking.
func FuzzServiceEntryClusters(f *testing.F) {
	for _, s := range entrySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, spec []byte) {
		msg, errs := validate.DecodeSpec(validate.KindServiceEntry, spec)
		if len(errs) > 0 {
			t.Skip()
		}
		se := msg.(*networking.ServiceEntry)
		if errs := validate.Spec(se); len(errs) > 0 {
			t.Skip()
		}
		e := &istioconfig.ServiceEntry{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindServiceEntry, Namespace: "demo", Name: "x"}}, Spec: se}
		_ = istioconfig.EntryNotes(e)
		for _, h := range se.GetHosts() {
			if strings.HasPrefix(h, "*") {
				continue
			}
			ms := istioconfig.EntryService(model.Hostname(strings.ToLower(h)), e)
			if ms == nil {
				continue
			}
			grpc := ServiceClusters(ms, nil, nil, Options{Security: true})
			for _, c := range grpc {
				if err := grpcAcceptsCluster(c); err != nil {
					t.Errorf("grpc-go would refuse %s: %v", c.GetName(), err)
				}
			}
			checkClusters(t, grpc, SidecarClusters([]*model.MergedService{ms}, nil, Sidecar{}, Options{Security: true}))
			for _, cla := range LoadAssignments(ms, ProxyGroup{Cluster: "c1", Region: "r"}, nil) {
				if err := cla.ValidateAll(); err != nil {
					t.Errorf("load assignment %s: %v", cla.GetClusterName(), err)
				}
			}
			_ = ServiceNotes(ms, nil)
		}
	})
}

// TestEntrySeedsAreValid keeps the seeds meaningful: each passes the
// spec's validation, or the fuzz target would skip it.
func TestEntrySeedsAreValid(t *testing.T) {
	for _, s := range entrySeeds {
		msg, errs := validate.DecodeSpec(validate.KindServiceEntry, []byte(s))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", s, errs)
		}
		if errs := validate.Spec(msg); len(errs) > 0 {
			t.Errorf("%s: %v", s, errs)
		}
	}
}
