package validate

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// PeerAuthentication checks a PeerAuthentication spec. Paths start at
// "spec".
//
// Port-level settings apply only to the workloads a selector picks (a
// mesh- or namespace-wide policy cannot name their ports), so they need a
// selector with labels; each names a port and a mode other than UNSET.
func PeerAuthentication(pa *security.PeerAuthentication) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	checkWorkloadSelector(&e, spec.Child("selector"), pa.GetSelector())
	if m := pa.GetMtls(); m != nil {
		checkMTLSMode(&e, spec.Child("mtls", "mode"), m.GetMode())
	}
	ports := pa.GetPortLevelMtls()
	if len(ports) > 0 && len(pa.GetSelector().GetMatchLabels()) == 0 {
		e.add(spec.Child("portLevelMtls"), "portLevelMtls requires a workload selector (selector.matchLabels): "+
			"a mesh- or namespace-wide policy cannot set port-level mTLS")
	}
	for _, port := range slices.Sorted(maps.Keys(ports)) {
		p := spec.Child("portLevelMtls").Key(strconv.FormatUint(uint64(port), 10))
		checkPort(&e, p, port)
		m := ports[port]
		if m == nil {
			e.required(p)
			continue
		}
		if m.GetMode() == security.PeerAuthentication_MutualTLS_UNSET {
			e.add(p.Child("mode"), "required (DISABLE, PERMISSIVE or STRICT)")
			continue
		}
		checkMTLSMode(&e, p.Child("mode"), m.GetMode())
	}
	return e.list
}

func checkMTLSMode(e *errs, p *field.Path, m security.PeerAuthentication_MutualTLS_Mode) {
	if _, ok := security.PeerAuthentication_MutualTLS_Mode_name[int32(m)]; !ok {
		e.add(p, "unknown mode %d (one of UNSET, DISABLE, PERMISSIVE, STRICT)", int32(m))
	}
}

// checkWorkloadSelector checks the labels of an optional selector with
// Kubernetes' rules (which also refuse Istio's forbidden "*" and empty
// keys).
func checkWorkloadSelector(e *errs, p *field.Path, s *typev1beta1.WorkloadSelector) {
	if s != nil {
		checkLabels(e, p.Child("matchLabels"), s.GetMatchLabels())
	}
}

// AuthorizationPolicy checks an AuthorizationPolicy spec. Paths start at
// "spec".
//
// An ALLOW policy without rules is valid (it matches nothing, so it denies
// every request of its workloads) and `rules: [{}]` allows every request;
// a DENY or CUSTOM policy without rules would never act and is refused, as
// Istio refuses it.
func AuthorizationPolicy(ap *security.AuthorizationPolicy) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	action := ap.GetAction()
	_, knownAction := security.AuthorizationPolicy_Action_name[int32(action)]
	if !knownAction {
		e.add(spec.Child("action"), "unknown action %d (one of ALLOW, DENY, AUDIT, CUSTOM)", int32(action))
	}

	set := 0
	if ap.GetSelector() != nil {
		set++
	}
	if ap.GetTargetRef() != nil {
		set++
	}
	if len(ap.GetTargetRefs()) > 0 {
		set++
	}
	if set > 1 {
		e.add(spec, "only one of selector, targetRef or targetRefs may be set")
	}
	checkWorkloadSelector(&e, spec.Child("selector"), ap.GetSelector())
	if ref := ap.GetTargetRef(); ref != nil {
		checkTargetRef(&e, spec.Child("targetRef"), ref)
	}
	for i, ref := range ap.GetTargetRefs() {
		p := spec.Child("targetRefs").Index(i)
		if ref == nil {
			e.add(p, "must not be null")
			continue
		}
		checkTargetRef(&e, p, ref)
	}

	custom := action == security.AuthorizationPolicy_CUSTOM
	switch prov := ap.GetProvider(); {
	case custom && prov.GetName() == "":
		e.add(spec.Child("provider", "name"), "required with action CUSTOM (the extension provider of the mesh config that decides)")
	case !custom && prov != nil && knownAction:
		e.add(spec.Child("provider"), "only allowed with action CUSTOM, not %s", action)
	}
	if len(ap.GetRules()) == 0 && (action == security.AuthorizationPolicy_DENY || custom) {
		e.add(spec.Child("rules"), "required with action %s: without rules the policy never applies "+
			"(write rules: [{}] to match every request)", action)
	}
	for i, r := range ap.GetRules() {
		p := spec.Child("rules").Index(i)
		if r == nil {
			e.add(p, "must not be null")
			continue
		}
		checkRule(&e, p, r, custom)
	}
	return e.list
}

// targetKinds are the objects a policy may be attached to, by group ("" is
// the core group) and kind.
var targetKinds = map[[2]string]bool{
	{"", "Service"}:                               true,
	{"networking.istio.io", "ServiceEntry"}:       true,
	{"gateway.networking.k8s.io", "Gateway"}:      true,
	{"gateway.networking.k8s.io", "GatewayClass"}: true,
}

func checkTargetRef(e *errs, p *field.Path, ref *typev1beta1.PolicyTargetReference) {
	group, kind := ref.GetGroup(), ref.GetKind()
	if group == "core" {
		group = ""
	}
	switch {
	case kind == "":
		e.required(p.Child("kind"))
	case !targetKinds[[2]string{group, kind}]:
		e.add(p, "group %q kind %q cannot be targeted: one of Service (core group), ServiceEntry (networking.istio.io), "+
			"Gateway or GatewayClass (gateway.networking.k8s.io)", ref.GetGroup(), kind)
	}
	if ref.GetName() == "" {
		e.required(p.Child("name"))
	} else if msgs := validation.IsDNS1123Subdomain(ref.GetName()); len(msgs) > 0 {
		e.add(p.Child("name"), "%q is not an object name: %s", ref.GetName(), strings.Join(msgs, "; "))
	}
	if ref.GetNamespace() != "" {
		e.add(p.Child("namespace"), "must not be set: cross-namespace references are not supported (the policy's own namespace is used)")
	}
}

func checkRule(e *errs, p *field.Path, r *security.Rule, custom bool) {
	for j, from := range r.GetFrom() {
		fp := p.Child("from").Index(j)
		switch {
		case from == nil:
			e.add(fp, "must not be null")
		case from.GetSource() == nil:
			e.required(fp.Child("source"))
		default:
			checkSource(e, fp.Child("source"), from.GetSource(), custom)
		}
	}
	for j, to := range r.GetTo() {
		tp := p.Child("to").Index(j)
		switch {
		case to == nil:
			e.add(tp, "must not be null")
		case to.GetOperation() == nil:
			e.required(tp.Child("operation"))
		default:
			checkOperation(e, tp.Child("operation"), to.GetOperation())
		}
	}
	for k, c := range r.GetWhen() {
		wp := p.Child("when").Index(k)
		if c == nil {
			e.add(wp, "must not be null")
			continue
		}
		checkCondition(e, wp, c, custom)
	}
}

// stringList is one repeated string field of a Source or Operation: its
// JSON name, its values, and what each value must be ("" when only
// non-empty).
type stringList struct {
	name   string
	values []string
	check  func(string) string
}

// checkStringLists checks that each value of lists is non-empty and passes
// the list's check; it reports whether any list has a value.
func checkStringLists(e *errs, p *field.Path, lists []stringList) (anySet bool) {
	for _, l := range lists {
		if len(l.values) > 0 {
			anySet = true
		}
		for i, v := range l.values {
			vp := p.Child(l.name).Index(i)
			if v == "" {
				e.add(vp, "must not be empty")
				continue
			}
			if l.check != nil {
				if msg := l.check(v); msg != "" {
					e.add(vp, "%s", msg)
				}
			}
		}
	}
	return anySet
}

func checkSource(e *errs, p *field.Path, s *security.Source, custom bool) {
	lists := []stringList{
		{"principals", s.GetPrincipals(), nil},
		{"notPrincipals", s.GetNotPrincipals(), nil},
		{"requestPrincipals", s.GetRequestPrincipals(), nil},
		{"notRequestPrincipals", s.GetNotRequestPrincipals(), nil},
		{"namespaces", s.GetNamespaces(), nil},
		{"notNamespaces", s.GetNotNamespaces(), nil},
		{"serviceAccounts", s.GetServiceAccounts(), checkServiceAccount},
		{"notServiceAccounts", s.GetNotServiceAccounts(), checkServiceAccount},
		{"ipBlocks", s.GetIpBlocks(), checkIPBlock},
		{"notIpBlocks", s.GetNotIpBlocks(), checkIPBlock},
		{"remoteIpBlocks", s.GetRemoteIpBlocks(), checkIPBlock},
		{"notRemoteIpBlocks", s.GetNotRemoteIpBlocks(), checkIPBlock},
		{"trustDomains", s.GetTrustDomains(), nil},
		{"notTrustDomains", s.GetNotTrustDomains(), nil},
	}
	if !checkStringLists(e, p, lists) {
		e.add(p, "at least one field is required (e.g. principals, namespaces, serviceAccounts, ipBlocks)")
	}
	if len(s.GetServiceAccounts())+len(s.GetNotServiceAccounts()) > 0 &&
		len(s.GetPrincipals())+len(s.GetNotPrincipals())+len(s.GetNamespaces())+len(s.GetNotNamespaces()) > 0 {
		e.add(p, "serviceAccounts cannot be combined with principals or namespaces (nor their not* forms)")
	}
	if custom {
		for _, l := range lists {
			if len(l.values) > 0 && identityFields[l.name] {
				e.add(p.Child(l.name), "not supported with action CUSTOM")
			}
		}
	}
}

// identityFields are the Source fields that name peer or request
// identities, which Istio does not support with action CUSTOM.
var identityFields = map[string]bool{
	"principals": true, "notPrincipals": true, "requestPrincipals": true, "notRequestPrincipals": true,
	"namespaces": true, "notNamespaces": true, "serviceAccounts": true, "notServiceAccounts": true,
}

// checkServiceAccount: "namespace/name" or "name" (the policy's
// namespace), no wildcards.
func checkServiceAccount(sa string) string {
	if strings.Contains(sa, "*") {
		return fmt.Sprintf("%q: wildcards are not allowed in service accounts", sa)
	}
	ns, name, scoped := strings.Cut(sa, "/")
	if !scoped {
		ns, name = "", sa
	}
	if scoped && len(validation.IsDNS1123Label(ns)) != 0 {
		return fmt.Sprintf("%q: %q is not a namespace name", sa, ns)
	}
	if len(validation.IsDNS1123Subdomain(name)) != 0 {
		return fmt.Sprintf("%q must be \"namespace/serviceaccount\" or \"serviceaccount\"", sa)
	}
	return ""
}

func checkIPBlock(s string) string {
	if !isIPOrCIDR(s) {
		return fmt.Sprintf("%q is not an IP address or CIDR", s)
	}
	return ""
}

// checkPortString: a port as Istio writes it in policies, a decimal
// number.
func checkPortString(s string) string {
	if n, err := strconv.ParseUint(s, 10, 16); err != nil || n == 0 {
		return fmt.Sprintf("%q must be a port number between 1 and 65535", s)
	}
	return ""
}

func checkOperation(e *errs, p *field.Path, op *security.Operation) {
	lists := []stringList{
		{"hosts", op.GetHosts(), nil},
		{"notHosts", op.GetNotHosts(), nil},
		{"ports", op.GetPorts(), checkPortString},
		{"notPorts", op.GetNotPorts(), checkPortString},
		{"methods", op.GetMethods(), nil},
		{"notMethods", op.GetNotMethods(), nil},
		{"paths", op.GetPaths(), checkPathTemplate},
		{"notPaths", op.GetNotPaths(), checkPathTemplate},
	}
	if !checkStringLists(e, p, lists) {
		e.add(p, "at least one field is required (e.g. paths, methods, ports, hosts)")
	}
}

// checkPathTemplate checks a path using Istio's template operators ({*}:
// one segment, {**}: the rest of the path); a path without them is matched
// as written (exact, "prefix*" or "*suffix") and is not checked.
func checkPathTemplate(path string) string {
	if !strings.Contains(path, "{*}") && !strings.Contains(path, "{**}") {
		return ""
	}
	sawRest := false
	for _, seg := range strings.Split(path, "/") {
		switch {
		case seg == "{*}" || seg == "{**}":
			if sawRest {
				return fmt.Sprintf("%q: {**} must be the last operator of a path template", path)
			}
			sawRest = seg == "{**}"
		case strings.ContainsAny(seg, "*{}"):
			return fmt.Sprintf("%q: in a path template each {*} or {**} must be a whole segment, "+
				"and '*', '{', '}' may appear nowhere else", path)
		}
	}
	return ""
}

// conditionKind is how a condition key's values are checked.
type conditionKind int

const (
	condString conditionKind = iota
	condIP
	condPort
)

// conditionKeys are the condition keys Istio supports that take no name;
// request.headers[<name>], request.auth.claims[<name>] and
// experimental.envoy.filters.<filter>[<key>] take one.
var conditionKeys = map[string]conditionKind{
	"source.ip":              condIP,
	"remote.ip":              condIP,
	"source.namespace":       condString,
	"source.principal":       condString,
	"source.serviceAccount":  condString,
	"request.auth.principal": condString,
	"request.auth.audiences": condString,
	"request.auth.presenter": condString,
	"destination.ip":         condIP,
	"destination.port":       condPort,
	"connection.sni":         condString,
}

// bracketed reports whether key is prefix + "[" + name + "]" with a
// non-empty name.
func bracketed(key, prefix string) bool {
	name, ok := strings.CutPrefix(key, prefix+"[")
	return ok && len(name) > 1 && strings.HasSuffix(name, "]") && !strings.ContainsAny(name[:len(name)-1], "[]")
}

// retiredKeys are keys of Istio's older RBAC API, with what replaced them.
var retiredKeys = map[string]string{
	"destination.namespace": "the policy applies in its own namespace (metadata.namespace)",
	"destination.labels":    "use the policy's selector",
	"destination.name":      "it was only supported by the v1alpha1 RBAC API",
	"destination.user":      "it was only supported by the v1alpha1 RBAC API",
}

// conditionKeysHelp lists the supported keys for messages.
const conditionKeysHelp = "request.headers[<name>], source.ip, remote.ip, source.namespace, source.principal, " +
	"source.serviceAccount, request.auth.principal, request.auth.audiences, request.auth.presenter, " +
	"request.auth.claims[<name>], destination.ip, destination.port, connection.sni, experimental.envoy.filters.*[<key>]"

// checkConditionKey reports why key is not a supported condition key, or
// "", and how its values are checked.
func checkConditionKey(key string) (conditionKind, string) {
	if k, ok := conditionKeys[key]; ok {
		return k, ""
	}
	for _, prefix := range []string{"request.headers", "request.auth.claims"} {
		if strings.HasPrefix(key, prefix) {
			if !bracketed(key, prefix) {
				return condString, fmt.Sprintf("%q must be of the form %s[<name>]", key, prefix)
			}
			return condString, ""
		}
	}
	if rest, ok := strings.CutPrefix(key, "experimental.envoy.filters."); ok {
		// experimental.envoy.filters.<filter>[<metadata key>]
		filter, _, _ := strings.Cut(rest, "[")
		if filter == "" || !bracketed(rest, filter) {
			return condString, fmt.Sprintf("%q must be of the form experimental.envoy.filters.<filter>[<key>]", key)
		}
		return condString, ""
	}
	base, _, _ := strings.Cut(key, "[")
	if why, ok := retiredKeys[base]; ok {
		return condString, fmt.Sprintf("%q is not supported: %s", key, why)
	}
	return condString, fmt.Sprintf("unknown condition key %q (one of %s)", key, conditionKeysHelp)
}

func checkCondition(e *errs, p *field.Path, c *security.Condition, custom bool) {
	key := c.GetKey()
	kind := condString
	if key == "" {
		e.required(p.Child("key"))
	} else {
		var msg string
		if kind, msg = checkConditionKey(key); msg != "" {
			e.add(p.Child("key"), "%s", msg)
		}
		if custom && (key == "source.namespace" || key == "source.principal" || key == "source.serviceAccount" ||
			strings.HasPrefix(key, "request.auth.")) {
			e.add(p.Child("key"), "%q is not supported with action CUSTOM", key)
		}
	}
	if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
		e.add(p, "values or notValues is required")
	}
	var check func(string) string
	switch kind {
	case condIP:
		check = checkIPBlock
	case condPort:
		check = checkPortString
	}
	checkStringLists(e, p, []stringList{
		{"values", c.GetValues(), check},
		{"notValues", c.GetNotValues(), check},
	})
}
