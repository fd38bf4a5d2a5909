package xdsgen

import (
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
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
			inner, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatalf("unpack %s: %v", f.GetTypedConfig().GetTypeUrl(), err)
			}
			check(inner.(validator))
		}
	}
	for _, r := range Routes(svc, istioconfig.HostConfig{}, "") {
		check(r)
	}
	for _, c := range Clusters(svc, nil) {
		check(c)
	}
	groups := []ProxyGroup{groupEast, groupNoZone, {Cluster: "cluster-3", Region: "eu-west"}, {Cluster: "elsewhere"}}
	for _, g := range groups {
		for _, cla := range LoadAssignments(fleet(true), g, nil) {
			check(cla)
		}
		for _, cla := range LoadAssignments(fleet(false), g, nil) {
			check(cla)
		}
		for _, cla := range LoadAssignments(merged(), g, nil) {
			check(cla)
		}
		for seed := range uint64(20) {
			for _, cla := range LoadAssignments(randomService(seed, 200), g, nil) {
				check(cla)
			}
		}
	}
}
