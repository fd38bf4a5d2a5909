package validate

import (
	"net"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Sidecar checks a Sidecar spec. Paths start at "spec".
func Sidecar(sc *networking.Sidecar) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	if len(sc.GetEgress()) == 0 && len(sc.GetIngress()) == 0 && sc.GetOutboundTrafficPolicy() == nil &&
		sc.GetInboundConnectionPool() == nil {
		e.add(spec, "empty configuration: set egress, ingress, outboundTrafficPolicy or inboundConnectionPool")
	}
	if ws := sc.GetWorkloadSelector(); ws != nil {
		checkLabels(&e, spec.Child("workloadSelector", "labels"), ws.GetLabels())
	}
	seenIn := map[uint32]bool{}
	for i, in := range sc.GetIngress() {
		p := spec.Child("ingress").Index(i)
		if in.GetPort() == nil {
			e.required(p.Child("port"))
		} else {
			n := in.GetPort().GetNumber()
			checkPort(&e, p.Child("port", "number"), n)
			checkProtocol(&e, p.Child("port", "protocol"), in.GetPort().GetProtocol())
			if seenIn[n] {
				e.add(p.Child("port", "number"), "duplicate ingress port %d", n)
			}
			seenIn[n] = true
		}
		checkBind(&e, p.Child("bind"), in.GetBind())
		if de := in.GetDefaultEndpoint(); de != "" {
			checkDefaultEndpoint(&e, p.Child("defaultEndpoint"), de)
		}
		if cp := in.GetConnectionPool(); cp != nil {
			checkConnectionPool(&e, p.Child("connectionPool"), cp)
		}
	}
	seenOut := map[uint32]bool{}
	catchAll := -1
	for i, eg := range sc.GetEgress() {
		p := spec.Child("egress").Index(i)
		if eg.GetPort() == nil {
			if catchAll >= 0 {
				e.add(p, "only one egress listener may omit port (egress[%d] already does)", catchAll)
			} else if i != len(sc.GetEgress())-1 {
				e.add(p, "the egress listener without port must be the last one")
			}
			catchAll = i
		} else {
			n := eg.GetPort().GetNumber()
			checkPort(&e, p.Child("port", "number"), n)
			checkProtocol(&e, p.Child("port", "protocol"), eg.GetPort().GetProtocol())
			if seenOut[n] {
				e.add(p.Child("port", "number"), "duplicate egress port %d", n)
			}
			seenOut[n] = true
		}
		checkBind(&e, p.Child("bind"), eg.GetBind())
		if len(eg.GetHosts()) == 0 {
			e.add(p.Child("hosts"), "required (at least one \"namespace/host\")")
		}
		for j, h := range eg.GetHosts() {
			checkEgressHost(&e, p.Child("hosts").Index(j), h)
		}
	}
	if ot := sc.GetOutboundTrafficPolicy(); ot != nil && ot.GetEgressProxy() != nil {
		p := spec.Child("outboundTrafficPolicy")
		if ot.GetMode() != networking.OutboundTrafficPolicy_ALLOW_ANY {
			e.add(p.Child("egressProxy"), "requires mode ALLOW_ANY")
		}
		checkDestination(&e, p.Child("egressProxy"), ot.GetEgressProxy())
	}
	if cp := sc.GetInboundConnectionPool(); cp != nil {
		checkConnectionPool(&e, spec.Child("inboundConnectionPool"), cp)
	}
	return e.list
}

// checkEgressHost checks "namespace/dnsName": namespace is a namespace
// name, "*" (any), "." (the Sidecar's own) or "~" (none); dnsName is a
// host name or wildcard.
func checkEgressHost(e *errs, p *field.Path, h string) {
	ns, host, ok := strings.Cut(h, "/")
	if !ok || strings.Contains(host, "/") {
		e.add(p, "%q must be of the form namespace/dnsName, e.g. \"istio-system/*\" or \"./reviews.default.svc.cluster.local\"", h)
		return
	}
	switch {
	case ns == "*" || ns == "." || ns == "~":
	case ns == "":
		e.add(p, "%q: namespace is empty (use \"*\" for any namespace)", h)
	case len(validation.IsDNS1123Label(ns)) != 0:
		e.add(p, "%q: %q is not a namespace name, \"*\", \".\" or \"~\"", h, ns)
	}
	if msg := checkWildcardHost(host); msg != "" {
		e.add(p, "%q: host %s", h, msg)
	}
}

// checkBind: an IP address or a unix domain socket.
func checkBind(e *errs, p *field.Path, bind string) {
	if bind != "" && !isIP(bind) && !strings.HasPrefix(bind, "unix://") {
		e.add(p, "%q must be an IP address or unix:// path", bind)
	}
}

// checkDefaultEndpoint: "127.0.0.1:PORT", "0.0.0.0:PORT", "[::1]:PORT",
// "[::]:PORT" or "unix:///path".
func checkDefaultEndpoint(e *errs, p *field.Path, ep string) {
	if path, ok := strings.CutPrefix(ep, "unix://"); ok {
		if path == "" {
			e.add(p, "unix domain socket path is empty")
		}
		return
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		e.add(p, "%q must be IP:PORT or unix:///path", ep)
		return
	}
	switch host {
	case "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		e.add(p, "%q: host must be 127.0.0.1, 0.0.0.0, ::1 or ::", ep)
	}
	if n, err := strconv.ParseUint(port, 10, 32); err != nil || n < 1 || n > 65535 {
		e.add(p, "%q: port must be between 1 and 65535", ep)
	}
}
