package xdsgen

import (
	"fmt"
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// ConfigNotes returns what the generators leave out of o for each proxy
// kind, whatever service it applies to: for a VirtualService the notes of
// its rules on every port its matches name and on one port they do not,
// for a DestinationRule ClusterNotes, for a Sidecar SidecarNotes, for an
// AuthorizationPolicy AuthzNotes. It lets the hub say, once per
// object, what it does not apply. It is pure.
func ConfigNotes(o istioconfig.Object, domainSuffix string) []RouteNote {
	var out []RouteNote
	add := func(ns []RouteNote) {
		for _, n := range ns {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	switch o := o.(type) {
	case *istioconfig.VirtualService:
		add(gatewayRouteNotes(o, domainSuffix))
		if !o.BoundToMesh() {
			break
		}
		add(L4Notes(o))
		for _, kind := range Kinds {
			cfg := istioconfig.HostConfig{VirtualService: o}
			for _, h := range o.Spec.GetHosts() {
				host := istioconfig.ResolveHost(h, o.Namespace, domainSuffix)
				for _, port := range notePorts(o) {
					_, ns := virtualServiceRoutes(kind, host, port, cfg, istioconfig.RouteClass{}, domainSuffix, nil)
					add(ns)
				}
			}
		}
	case *istioconfig.DestinationRule:
		for _, kind := range Kinds {
			add(ClusterNotes(kind, o))
		}
	case *istioconfig.Gateway:
		_, notes := gatewayPorts([]*istioconfig.Gateway{o})
		for _, n := range notes {
			add([]RouteNote{{Object: n.Object, Kind: ProxyRouter, Field: n.Field, Reason: n.Reason}})
		}
	case *istioconfig.Sidecar:
		// Sidecars scope Envoy sidecars only.
		add(SidecarNotes(o))
	case *istioconfig.AuthorizationPolicy:
		// AuthzNotes covers every proxy kind at once.
		add(AuthzNotes(o))
	}
	return out
}

// gatewayRouteNotes are the notes of vs's HTTP rules for the gateways it
// is bound to (those of the first one it names, with every port its
// matches name).
func gatewayRouteNotes(vs *istioconfig.VirtualService, domainSuffix string) []RouteNote {
	for _, name := range vs.Spec.GetGateways() {
		gw, ok := istioconfig.GatewayKey(name, vs.Namespace)
		if !ok {
			continue
		}
		var out []RouteNote
		for _, port := range notePorts(vs) {
			t := &translator{kind: ProxyRouter, can: ProxyRouter.Can(), port: port, vs: vs, domainSuffix: domainSuffix, gateway: gw,
				drs: func(model.Hostname) *istioconfig.DestinationRule { return nil }}
			for i, rule := range vs.Spec.GetHttp() {
				t.rule(fmt.Sprintf("spec.http[%d]", i), rule)
			}
			out = append(out, t.notes...)
		}
		return out
	}
	return nil
}

// notePorts are the ports whose routes show every note of vs: those its
// matches name, and the lowest one they do not (where port-less rules
// apply alone).
func notePorts(vs *istioconfig.VirtualService) []uint32 {
	var ports []uint32
	for _, r := range vs.Spec.GetHttp() {
		for _, m := range r.GetMatch() {
			if p := m.GetPort(); p != 0 && !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	other := uint32(1)
	for slices.Contains(ports, other) {
		other++
	}
	return append(ports, other)
}

// SidecarNotes returns what the Envoy sidecar generators leave out of the
// Sidecar s: listeners' captureMode, egress listeners' bind, ingress
// listeners' tls and connectionPool, and inboundConnectionPool. It is
// pure.
func SidecarNotes(s *istioconfig.Sidecar) []RouteNote {
	if s == nil || s.Spec == nil {
		return nil
	}
	var out []RouteNote
	note := func(field, reason string) {
		out = append(out, RouteNote{Object: s.Key, Kind: ProxyEnvoy, Field: field, Reason: reason})
	}
	for i, in := range s.Spec.GetIngress() {
		p := fmt.Sprintf("spec.ingress[%d]", i)
		if in.GetCaptureMode() != networking.CaptureMode_DEFAULT {
			note(p+".captureMode", "not supported yet; the node's interception mode applies")
		}
		if in.GetTls() != nil {
			note(p+".tls", "not supported yet; the port's PeerAuthentication decides its TLS")
		}
		if in.GetConnectionPool() != nil {
			note(p+".connectionPool", "not supported yet; dropped")
		}
	}
	for i, eg := range s.Spec.GetEgress() {
		p := fmt.Sprintf("spec.egress[%d]", i)
		if eg.GetBind() != "" {
			note(p+".bind", "not supported yet; outbound listeners bind as the interception mode decides")
		}
		if eg.GetCaptureMode() != networking.CaptureMode_DEFAULT {
			note(p+".captureMode", "not supported yet; the node's interception mode applies")
		}
	}
	if s.Spec.GetInboundConnectionPool() != nil {
		note("spec.inboundConnectionPool", "not supported yet; dropped")
	}
	return out
}
