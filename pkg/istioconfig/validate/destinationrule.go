package validate

import (
	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DestinationRule checks a DestinationRule spec. Paths start at "spec".
func DestinationRule(dr *networking.DestinationRule) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	if msg := checkWildcardHost(dr.GetHost()); msg != "" {
		if dr.GetHost() == "" {
			e.required(spec.Child("host"))
		} else {
			e.add(spec.Child("host"), "%q: %s", dr.GetHost(), msg)
		}
	}
	if tp := dr.GetTrafficPolicy(); tp != nil {
		checkTrafficPolicy(&e, spec.Child("trafficPolicy"), tp)
	}
	seen := map[string]bool{}
	for i, s := range dr.GetSubsets() {
		p := spec.Child("subsets").Index(i)
		switch name := s.GetName(); {
		case name == "":
			e.required(p.Child("name"))
		case len(validation.IsDNS1123Label(name)) != 0:
			e.add(p.Child("name"), "%q is not a valid subset name (DNS-1123 label)", name)
		case seen[name]:
			e.add(p.Child("name"), "duplicate subset %q", name)
		}
		seen[s.GetName()] = true
		checkLabels(&e, p.Child("labels"), s.GetLabels())
		if tp := s.GetTrafficPolicy(); tp != nil {
			checkTrafficPolicy(&e, p.Child("trafficPolicy"), tp)
		}
	}
	if ws := dr.GetWorkloadSelector(); ws != nil {
		checkLabels(&e, spec.Child("workloadSelector", "matchLabels"), ws.GetMatchLabels())
	}
	checkExportTo(&e, spec.Child("exportTo"), dr.GetExportTo())
	return e.list
}

func checkTrafficPolicy(e *errs, p *field.Path, tp *networking.TrafficPolicy) {
	if tp.GetLoadBalancer() == nil && tp.GetConnectionPool() == nil && tp.GetOutlierDetection() == nil &&
		tp.GetTls() == nil && len(tp.GetPortLevelSettings()) == 0 && tp.GetTunnel() == nil &&
		tp.GetProxyProtocol() == nil && tp.GetRetryBudget() == nil {
		e.add(p, "must set at least one field")
	}
	checkPolicyParts(e, p, tp.GetConnectionPool(), tp.GetOutlierDetection(), tp.GetTls())
	seen := map[uint32]bool{}
	for i, pl := range tp.GetPortLevelSettings() {
		pp := p.Child("portLevelSettings").Index(i)
		if pl.GetPort() == nil {
			e.required(pp.Child("port"))
		} else {
			n := pl.GetPort().GetNumber()
			checkPort(e, pp.Child("port", "number"), n)
			if seen[n] {
				e.add(pp.Child("port", "number"), "duplicate port %d", n)
			}
			seen[n] = true
		}
		checkPolicyParts(e, pp, pl.GetConnectionPool(), pl.GetOutlierDetection(), pl.GetTls())
	}
}

func checkPolicyParts(e *errs, p *field.Path, cp *networking.ConnectionPoolSettings, od *networking.OutlierDetection, tls *networking.ClientTLSSettings) {
	if cp != nil {
		checkConnectionPool(e, p.Child("connectionPool"), cp)
	}
	if od != nil {
		op := p.Child("outlierDetection")
		//lint:ignore SA1019 Istio still accepts the deprecated field, so it is validated.
		nonNegative(e, op.Child("consecutiveErrors"), od.GetConsecutiveErrors())
		checkDuration(e, op.Child("interval"), od.GetInterval())
		checkDuration(e, op.Child("baseEjectionTime"), od.GetBaseEjectionTime())
		percent(e, op.Child("maxEjectionPercent"), od.GetMaxEjectionPercent())
		percent(e, op.Child("minHealthPercent"), od.GetMinHealthPercent())
	}
	if tls != nil {
		tp := p.Child("tls")
		switch tls.GetMode() {
		case networking.ClientTLSSettings_MUTUAL:
			if tls.GetCredentialName() == "" {
				if tls.GetClientCertificate() == "" {
					e.add(tp.Child("clientCertificate"), "required with mode MUTUAL unless credentialName is set")
				}
				if tls.GetPrivateKey() == "" {
					e.add(tp.Child("privateKey"), "required with mode MUTUAL unless credentialName is set")
				}
			}
		case networking.ClientTLSSettings_ISTIO_MUTUAL:
			for _, f := range []struct{ name, v string }{
				{"clientCertificate", tls.GetClientCertificate()}, {"privateKey", tls.GetPrivateKey()},
				{"caCertificates", tls.GetCaCertificates()}, {"credentialName", tls.GetCredentialName()},
			} {
				if f.v != "" {
					e.add(tp.Child(f.name), "must not be set with mode ISTIO_MUTUAL (the mesh's certificates are used)")
				}
			}
		}
	}
}

func checkConnectionPool(e *errs, p *field.Path, cp *networking.ConnectionPoolSettings) {
	if cp.GetTcp() == nil && cp.GetHttp() == nil {
		e.add(p, "tcp or http is required")
	}
	if t := cp.GetTcp(); t != nil {
		tp := p.Child("tcp")
		nonNegative(e, tp.Child("maxConnections"), t.GetMaxConnections())
		checkDuration(e, tp.Child("connectTimeout"), t.GetConnectTimeout())
		checkDuration(e, tp.Child("maxConnectionDuration"), t.GetMaxConnectionDuration())
		checkDuration(e, tp.Child("idleTimeout"), t.GetIdleTimeout())
	}
	if h := cp.GetHttp(); h != nil {
		hp := p.Child("http")
		nonNegative(e, hp.Child("http1MaxPendingRequests"), h.GetHttp1MaxPendingRequests())
		nonNegative(e, hp.Child("http2MaxRequests"), h.GetHttp2MaxRequests())
		nonNegative(e, hp.Child("maxRequestsPerConnection"), h.GetMaxRequestsPerConnection())
		nonNegative(e, hp.Child("maxRetries"), h.GetMaxRetries())
		nonNegative(e, hp.Child("maxConcurrentStreams"), h.GetMaxConcurrentStreams())
		checkDuration(e, hp.Child("idleTimeout"), h.GetIdleTimeout())
	}
}

func nonNegative(e *errs, p *field.Path, v int32) {
	if v < 0 {
		e.add(p, "must not be negative, got %d", v)
	}
}

func percent(e *errs, p *field.Path, v int32) {
	if v < 0 || v > 100 {
		e.add(p, "must be between 0 and 100, got %d", v)
	}
}
