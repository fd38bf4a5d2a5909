package validate

import (
	"maps"
	"slices"
	"strings"

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
	checkLocalityLB(e, p.Child("loadBalancer", "localityLbSetting"), tp.GetLoadBalancer().GetLocalityLbSetting())
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
		checkLocalityLB(e, pp.Child("loadBalancer", "localityLbSetting"), pl.GetLoadBalancer().GetLocalityLbSetting())
	}
}

// checkLocalityLB checks a localityLbSetting as Istio does: distribute
// and failover exclude each other; each distribute entry names a locality
// to route from and weights to localities that sum to 100, each weight in
// 1..100, no two of its patterns overlapping; a failover's from and to
// differ. Locality patterns are "region/zone/subzone", where "*" may stand
// only for the last part given.
func checkLocalityLB(e *errs, p *field.Path, ls *networking.LocalityLoadBalancerSetting) {
	if ls == nil {
		return
	}
	if len(ls.GetDistribute()) > 0 && len(ls.GetFailover()) > 0 {
		e.add(p, "distribute and failover cannot both be set")
	}
	for i, d := range ls.GetDistribute() {
		dp := p.Child("distribute").Index(i)
		if d.GetFrom() == "" {
			e.required(dp.Child("from"))
		} else if msg := checkLocalityPattern(d.GetFrom()); msg != "" {
			e.add(dp.Child("from"), "%q: %s", d.GetFrom(), msg)
		}
		if len(d.GetTo()) == 0 {
			e.add(dp.Child("to"), "required (at least one locality and its weight)")
			continue
		}
		var sum uint32
		patterns := slices.Sorted(maps.Keys(d.GetTo()))
		for _, l := range patterns {
			w := d.GetTo()[l]
			tp := dp.Child("to").Key(l)
			if msg := checkLocalityPattern(l); msg != "" {
				e.add(tp, "%s", msg)
			}
			if w < 1 || w > 100 {
				e.add(tp, "weight %d is not in 1..100", w)
			}
			sum += w
		}
		if sum != 100 {
			e.add(dp.Child("to"), "weights sum to %d, want 100", sum)
		}
		for a, pa := range patterns {
			for _, pb := range patterns[a+1:] {
				if localityCovers(pa, pb) || localityCovers(pb, pa) {
					e.add(dp.Child("to"), "localities %q and %q overlap", pa, pb)
				}
			}
		}
	}
	for i, f := range ls.GetFailover() {
		fp := p.Child("failover").Index(i)
		switch {
		case f.GetFrom() == "":
			e.required(fp.Child("from"))
		case f.GetTo() == "":
			e.required(fp.Child("to"))
		case f.GetFrom() == f.GetTo():
			e.add(fp, "from and to are the same region %q", f.GetFrom())
		}
	}
}

// checkLocalityPattern says what is wrong with a locality pattern, "" if
// nothing: at most three non-empty parts, "*" only as the last.
func checkLocalityPattern(l string) string {
	parts := strings.Split(l, "/")
	if len(parts) > 3 {
		return "more than region/zone/subzone"
	}
	for i, part := range parts {
		switch {
		case part == "":
			return "empty part"
		case part == "*" && i != len(parts)-1:
			return `"*" may only stand for the last part`
		case strings.Contains(part, "*") && part != "*":
			return `a part is a name or "*"`
		}
	}
	return ""
}

// localityCovers reports whether pattern a matches every locality pattern
// b matches (a is b, or a prefix of it ending in "*", or shorter).
func localityCovers(a, b string) bool {
	ap, bp := strings.Split(a, "/"), strings.Split(b, "/")
	for i, part := range ap {
		if part == "*" {
			return true
		}
		if i >= len(bp) || bp[i] != part {
			return false
		}
	}
	return len(ap) <= len(bp)
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
