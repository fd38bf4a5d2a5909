package xdsgen

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/pkg/model"
)

// servicePorts returns the ports of svc that get resources: those in 1..65535,
// one per port number (the first declared wins), sorted by number. Every
// generator iterates the same list, so the resources of a service always
// name each other consistently.
func servicePorts(svc *model.Service) []model.ServicePort {
	if svc == nil {
		return nil
	}
	ports := make([]model.ServicePort, 0, len(svc.Ports))
	for _, p := range svc.Ports {
		if validPort(p.Port) && !slices.ContainsFunc(ports, func(q model.ServicePort) bool { return q.Port == p.Port }) {
			ports = append(ports, p)
		}
	}
	slices.SortStableFunc(ports, func(a, b model.ServicePort) int { return int(a.Port) - int(b.Port) })
	return ports
}

// adsConfigSource says "fetch it on the same ADS stream", the only config
// source (besides self) that grpc-go accepts for RDS and EDS.
func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// mustAny wraps m in an Any with deterministic marshalling. It only fails for
// a proto2 message missing required fields, which none of ours has, so a
// failure is a programming error.
func mustAny(m proto.Message) *anypb.Any {
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic("xdsgen: cannot wrap " + string(m.ProtoReflect().Descriptor().FullName()) + " in Any: " + err.Error())
	}
	return a
}
