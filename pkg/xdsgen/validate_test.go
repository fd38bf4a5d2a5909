package xdsgen

import (
	"testing"

	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is implemented by every envoy proto (protoc-gen-validate).
type validator interface {
	proto.Message
	ValidateAll() error
}

// TestValidateAll checks every generated resource against its proto's
// validation rules, including the messages packed in Any fields, which
// ValidateAll does not descend into.
func TestValidateAll(t *testing.T) {
	check := func(v validator) {
		t.Helper()
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%T: %v", v, err)
		}
	}
	unpack := func(a *anypb.Any, into validator) validator {
		t.Helper()
		if err := a.UnmarshalTo(into); err != nil {
			t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
		}
		return into
	}

	svc := echoService()
	for _, l := range Listeners(svc) {
		check(l)
		hcm := unpack(l.GetApiListener().GetApiListener(), &hcmv3.HttpConnectionManager{}).(*hcmv3.HttpConnectionManager)
		check(hcm)
		for _, f := range hcm.GetHttpFilters() {
			check(unpack(f.GetTypedConfig(), &routerv3.Router{}))
		}
	}
	for _, r := range Routes(svc) {
		check(r)
	}
	for _, c := range Clusters(svc) {
		check(c)
	}
	groups := []ProxyGroup{groupEast, groupNoZone, {Cluster: "cluster-3", Region: "eu-west"}, {Cluster: "elsewhere"}}
	for _, g := range groups {
		for _, cla := range LoadAssignments(fleet(true), g) {
			check(cla)
		}
		for _, cla := range LoadAssignments(fleet(false), g) {
			check(cla)
		}
		for _, cla := range LoadAssignments(merged(), g) {
			check(cla)
		}
		for seed := range uint64(20) {
			for _, cla := range LoadAssignments(randomService(seed, 200), g) {
				check(cla)
			}
		}
	}
}
