package xdsgen

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbactcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
)

// Authorization (AuthorizationPolicy → RBAC).
//
// The policies of a workload become up to three RBAC filters, in the order
// Istio evaluates them: AUDIT (action LOG, Envoy only), DENY, ALLOW. A
// request is refused when it matches a DENY rule, or when some ALLOW
// policy applies to the workload and the request matches none of the ALLOW
// rules; an ALLOW policy without rules therefore denies everything. CUSTOM
// policies (external authorization) are not supported: they are noted,
// and the workloads they select deny every request (fail closed, as
// istiod does when the policy's provider is unknown).
//
// Each rule is one RBAC policy, named as istiod names it,
// "ns-<ns>-policy-<name>-rule-<i>": its principals are the rule's from
// entries and its permissions the to entries (any when absent), both ANDed
// with the rule's when conditions. Inside a source or operation the fields
// are ANDed, the values of one field ORed, and a not-field is the negation
// of the OR of its values.
//
// What a proxy cannot enforce (a matcher grpc-go lacks, an HTTP field on a
// TCP chain, JWT attributes: meshfed has no RequestAuthentication) is left
// out so that the result is never more permissive than the policy: an
// ALLOW rule with such a condition is dropped (it matches nothing), and in
// a DENY (or AUDIT) rule the condition alone is dropped, so that the rule
// matches more. AuthzNotes says which, for each proxy kind.

const (
	// filterHTTPRBAC is the name of the HTTP RBAC filter. grpc-go refuses
	// two HTTP filters of one name, so each action's filter carries a
	// suffix: filterHTTPRBAC + ".deny".
	filterHTTPRBAC = "envoy.filters.http.rbac"
	// filterNetworkRBAC is the name of the network (TCP) RBAC filter.
	filterNetworkRBAC = "envoy.filters.network.rbac"
	// tcpRBACStatPrefix is the stat prefix of the network RBAC filters.
	tcpRBACStatPrefix = "tcp."
)

// authzActions are the actions that generate filters, in evaluation order.
var authzActions = []security.AuthorizationPolicy_Action{
	security.AuthorizationPolicy_AUDIT,
	security.AuthorizationPolicy_DENY,
	security.AuthorizationPolicy_ALLOW,
}

// AuthzHTTPFilters returns the HTTP filters that enforce policies on a
// workload's inbound side for proxy kind k, to go before the router: one
// RBAC filter per action that some policy has (AUDIT for Envoy only, then
// DENY, then ALLOW), named "envoy.filters.http.rbac.<action>". Policies
// are those that apply to the workload (WorkloadSecurity), in key order.
// opts is not read: Istio principals carry their trust domain, and are
// matched as written. An ALLOW filter without policies (ALLOW policies
// whose rules are all empty or dropped) denies every request. It is pure.
func AuthzHTTPFilters(policies []*istioconfig.AuthorizationPolicy, k ProxyKind, opts Options) []*hcmv3.HttpFilter {
	var out []*hcmv3.HttpFilter
	for _, action := range authzActions {
		if action == security.AuthorizationPolicy_AUDIT && !k.Can().AuditAction.Can() {
			continue
		}
		rules, _ := authzRBAC(policies, action, authzTarget{kind: k})
		if rules == nil {
			continue
		}
		out = append(out, &hcmv3.HttpFilter{
			Name:       filterHTTPRBAC + "." + strings.ToLower(action.String()),
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&rbachttpv3.RBAC{Rules: rules})},
		})
	}
	return out
}

// AuthzNetworkFilters returns the network filters that enforce policies on
// an Envoy workload's TCP inbound chains, to go before tcp_proxy: one
// envoy.filters.network.rbac per action that some policy has (AUDIT, DENY,
// ALLOW), stat prefix "tcp.". HTTP-only conditions (hosts, methods, paths,
// request headers, JWT attributes) cannot hold on a TCP connection: an
// ALLOW rule with one is dropped, a DENY rule ignores it, as in Istio. It
// is pure.
func AuthzNetworkFilters(policies []*istioconfig.AuthorizationPolicy, opts Options) []*listenerv3.Filter {
	var out []*listenerv3.Filter
	for _, action := range authzActions {
		rules, _ := authzRBAC(policies, action, authzTarget{kind: ProxyEnvoy, tcp: true})
		if rules == nil {
			continue
		}
		out = append(out, &listenerv3.Filter{
			Name: filterNetworkRBAC,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&rbactcpv3.RBAC{
				Rules:      rules,
				StatPrefix: tcpRBACStatPrefix,
			})},
		})
	}
	return out
}

// AuthzNotes returns what proxy kinds leave out of policy p: for proxyless
// gRPC and for Envoy's HTTP chains (Kind ProxyGRPC, ProxyEnvoy), and for
// Envoy's TCP chains (Kind ProxyEnvoy, a reason saying "TCP"), without
// duplicates, in that order. It is pure.
func AuthzNotes(p *istioconfig.AuthorizationPolicy) []RouteNote {
	if p == nil || p.Spec == nil {
		return nil
	}
	var out []RouteNote
	for _, t := range []authzTarget{{kind: ProxyGRPC}, {kind: ProxyEnvoy}, {kind: ProxyEnvoy, tcp: true}} {
		action := p.Spec.GetAction()
		var ns []RouteNote
		switch {
		case action == security.AuthorizationPolicy_CUSTOM:
			if t.tcp {
				continue
			}
			ns = []RouteNote{{Object: p.Key, Kind: t.kind, Field: "spec.action",
				Reason: "CUSTOM (external authorization) is not supported; the workloads it selects deny every request"}}
		case action == security.AuthorizationPolicy_AUDIT && !t.kind.Can().AuditAction.Can():
			ns = []RouteNote{{Object: p.Key, Kind: t.kind, Field: "spec.action",
				Reason: string(t.kind.Can().AuditAction) + "; the policy is not applied"}}
		default:
			_, ns = authzRBAC([]*istioconfig.AuthorizationPolicy{p}, action, t)
		}
		for _, n := range ns {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// authzTarget is what the RBAC is built for: a proxy kind, and for Envoy
// HTTP or TCP chains.
type authzTarget struct {
	kind ProxyKind
	tcp  bool
}

func (t authzTarget) String() string {
	if t.tcp {
		return t.kind.String() + " TCP chains"
	}
	return t.kind.String()
}

// authzRBAC returns the RBAC rules of the policies with action for t, nil
// when none has the action, and notes on what was left out.
func authzRBAC(policies []*istioconfig.AuthorizationPolicy, action security.AuthorizationPolicy_Action, t authzTarget) (*rbacv3.RBAC, []RouteNote) {
	var out *rbacv3.RBAC
	var notes []RouteNote
	for _, p := range policies {
		if action == security.AuthorizationPolicy_DENY && p != nil && p.Spec.GetAction() == security.AuthorizationPolicy_CUSTOM {
			// External authorization is not supported: fail closed, as
			// istiod does for a provider it cannot find.
			if out == nil {
				out = &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{}}
			}
			out.Policies[fmt.Sprintf("ns-%s-policy-%s-custom-unsupported", p.Namespace, p.Name)] = &rbacv3.Policy{
				Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
				Principals:  []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}},
			}
			continue
		}
		if p == nil || p.Spec == nil || p.Spec.GetAction() != action {
			continue
		}
		if out == nil {
			out = &rbacv3.RBAC{Action: rbacAction(action), Policies: map[string]*rbacv3.Policy{}}
		}
		for i, r := range p.Spec.GetRules() {
			b := ruleBuilder{
				target: t,
				strict: action == security.AuthorizationPolicy_ALLOW,
				action: action,
				policy: p,
				field:  fmt.Sprintf("spec.rules[%d]", i),
			}
			pol := b.rule(r)
			notes = append(notes, b.notes...)
			if pol != nil {
				out.Policies[fmt.Sprintf("ns-%s-policy-%s-rule-%d", p.Namespace, p.Name, i)] = pol
			}
		}
	}
	if out != nil && len(out.Policies) == 0 && action != security.AuthorizationPolicy_ALLOW {
		// A DENY or AUDIT filter without policies does nothing.
		out = nil
	}
	return out, notes
}

func rbacAction(a security.AuthorizationPolicy_Action) rbacv3.RBAC_Action {
	switch a {
	case security.AuthorizationPolicy_DENY:
		return rbacv3.RBAC_DENY
	case security.AuthorizationPolicy_AUDIT:
		return rbacv3.RBAC_LOG
	}
	return rbacv3.RBAC_ALLOW
}

// ruleBuilder converts one rule.
type ruleBuilder struct {
	target authzTarget
	// strict (ALLOW): a condition that cannot be generated drops the
	// whole rule; otherwise (DENY, AUDIT) only the condition.
	strict  bool
	action  security.AuthorizationPolicy_Action
	policy  *istioconfig.AuthorizationPolicy
	field   string // "spec.rules[i]"
	dropped bool
	notes   []RouteNote
}

// leftOut records that the condition at field cannot be generated, and why.
func (b *ruleBuilder) leftOut(field, why string) {
	var effect string
	switch {
	case b.strict:
		b.dropped = true
		effect = "the ALLOW rule is left out (it matches nothing)"
	case b.action == security.AuthorizationPolicy_AUDIT:
		effect = "the AUDIT rule ignores this condition (it logs more)"
	default:
		effect = "the DENY rule ignores this condition (it denies more)"
	}
	b.notes = append(b.notes, RouteNote{
		Object: b.policy.Key,
		Kind:   b.target.kind,
		Field:  field,
		Reason: why + " for " + b.target.String() + "; " + effect,
	})
}

// rule returns the RBAC policy of r, nil when it is dropped.
func (b *ruleBuilder) rule(r *security.Rule) *rbacv3.Policy {
	var froms []*rbacv3.Principal
	for j, f := range r.GetFrom() {
		froms = append(froms, b.source(fmt.Sprintf("%s.from[%d].source", b.field, j), f.GetSource()))
	}
	var tos []*rbacv3.Permission
	for j, t := range r.GetTo() {
		tos = append(tos, b.operation(fmt.Sprintf("%s.to[%d].operation", b.field, j), t.GetOperation()))
	}
	principals := []*rbacv3.Principal{orIDs(froms)}
	permissions := []*rbacv3.Permission{orRules(tos)}
	for j, c := range r.GetWhen() {
		field := fmt.Sprintf("%s.when[%d]", b.field, j)
		prin, perm, why := b.condition(c.GetKey())
		if why == "" && len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
			why = "a condition without values is not supported"
		}
		if why != "" {
			b.leftOut(field, why)
			continue
		}
		if prin != nil {
			principals = append(principals, b.principalTerm(field+".values", c.GetValues(), false, prin)...)
			principals = append(principals, b.principalTerm(field+".notValues", c.GetNotValues(), true, prin)...)
		} else {
			permissions = append(permissions, b.permissionTerm(field+".values", c.GetValues(), false, perm)...)
			permissions = append(permissions, b.permissionTerm(field+".notValues", c.GetNotValues(), true, perm)...)
		}
	}
	if b.dropped {
		return nil
	}
	return &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{andRules(permissions)},
		Principals:  []*rbacv3.Principal{andIDs(principals)},
	}
}

// principalFunc converts one value of a field; why is non-empty when it
// cannot be generated.
type principalFunc func(v string) (p *rbacv3.Principal, why string)

type permissionFunc func(v string) (p *rbacv3.Permission, why string)

// principalTerm returns the term of one field: any of values (negated:
// none of them); nothing when values is empty or the field is left out.
func (b *ruleBuilder) principalTerm(field string, values []string, not bool, f principalFunc) []*rbacv3.Principal {
	if len(values) == 0 {
		return nil
	}
	var ids []*rbacv3.Principal
	for _, v := range values {
		p, why := f(v)
		if why != "" {
			b.leftOut(field, why)
			return nil
		}
		ids = append(ids, p)
	}
	t := orIDs(ids)
	if not {
		t = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: t}}
	}
	return []*rbacv3.Principal{t}
}

func (b *ruleBuilder) permissionTerm(field string, values []string, not bool, f permissionFunc) []*rbacv3.Permission {
	if len(values) == 0 {
		return nil
	}
	var rules []*rbacv3.Permission
	for _, v := range values {
		p, why := f(v)
		if why != "" {
			b.leftOut(field, why)
			return nil
		}
		rules = append(rules, p)
	}
	t := orRules(rules)
	if not {
		t = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: t}}
	}
	return []*rbacv3.Permission{t}
}

// source returns the principal of one from entry.
func (b *ruleBuilder) source(field string, s *security.Source) *rbacv3.Principal {
	var terms []*rbacv3.Principal
	add := func(name string, values []string, not bool, f principalFunc) {
		terms = append(terms, b.principalTerm(field+"."+name, values, not, f)...)
	}
	ns := b.policy.Namespace
	add("principals", s.GetPrincipals(), false, principalName)
	add("notPrincipals", s.GetNotPrincipals(), true, principalName)
	add("requestPrincipals", s.GetRequestPrincipals(), false, jwtAttribute)
	add("notRequestPrincipals", s.GetNotRequestPrincipals(), true, jwtAttribute)
	add("namespaces", s.GetNamespaces(), false, namespacePrincipal)
	add("notNamespaces", s.GetNotNamespaces(), true, namespacePrincipal)
	add("serviceAccounts", s.GetServiceAccounts(), false, serviceAccountPrincipal(ns))
	add("notServiceAccounts", s.GetNotServiceAccounts(), true, serviceAccountPrincipal(ns))
	add("trustDomains", s.GetTrustDomains(), false, trustDomainPrincipal)
	add("notTrustDomains", s.GetNotTrustDomains(), true, trustDomainPrincipal)
	add("ipBlocks", s.GetIpBlocks(), false, directRemoteIP)
	add("notIpBlocks", s.GetNotIpBlocks(), true, directRemoteIP)
	add("remoteIpBlocks", s.GetRemoteIpBlocks(), false, b.remoteIP)
	add("notRemoteIpBlocks", s.GetNotRemoteIpBlocks(), true, b.remoteIP)
	return andIDs(terms)
}

// operation returns the permission of one to entry.
func (b *ruleBuilder) operation(field string, o *security.Operation) *rbacv3.Permission {
	var terms []*rbacv3.Permission
	add := func(name string, values []string, not bool, f permissionFunc) {
		terms = append(terms, b.permissionTerm(field+"."+name, values, not, f)...)
	}
	add("hosts", o.GetHosts(), false, b.httpPermission(hostPermission))
	add("notHosts", o.GetNotHosts(), true, b.httpPermission(hostPermission))
	add("ports", o.GetPorts(), false, portPermission)
	add("notPorts", o.GetNotPorts(), true, portPermission)
	add("methods", o.GetMethods(), false, b.httpPermission(methodPermission))
	add("notMethods", o.GetNotMethods(), true, b.httpPermission(methodPermission))
	add("paths", o.GetPaths(), false, b.httpPermission(b.pathPermission))
	add("notPaths", o.GetNotPaths(), true, b.httpPermission(b.pathPermission))
	return andRules(terms)
}

// condition returns the converter of a when key: a principal or a
// permission one, or why it is not supported.
func (b *ruleBuilder) condition(key string) (principalFunc, permissionFunc, string) {
	switch key {
	case "source.ip":
		return directRemoteIP, nil, ""
	case "remote.ip":
		return b.remoteIP, nil, ""
	case "source.namespace":
		return namespacePrincipal, nil, ""
	case "source.principal":
		return principalName, nil, ""
	case "source.serviceAccount":
		return serviceAccountPrincipal(b.policy.Namespace), nil, ""
	case "destination.ip":
		return nil, destinationIP, ""
	case "destination.port":
		return nil, portPermission, ""
	case "connection.sni":
		if lack := b.target.kind.Can().SNIPrincipal; !lack.Can() {
			return nil, nil, string(lack)
		}
		return nil, serverName, ""
	}
	if name, ok := strings.CutPrefix(key, "request.headers["); ok && strings.HasSuffix(name, "]") {
		if b.target.tcp {
			return nil, nil, "request headers are HTTP only"
		}
		name = strings.ToLower(strings.TrimSuffix(name, "]"))
		if why := b.headerName(name); why != "" {
			return nil, nil, why
		}
		return func(v string) (*rbacv3.Principal, string) {
			return &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: authzHeader(name, v, false)}}, ""
		}, nil, ""
	}
	if strings.HasPrefix(key, "request.auth.") {
		return nil, nil, "JWT attributes (" + key + ") are not supported: meshfed has no RequestAuthentication"
	}
	return nil, nil, fmt.Sprintf("condition key %q is not supported", key)
}

// headerName says why a request header cannot be matched, "" when it can.
func (b *ruleBuilder) headerName(name string) string {
	switch {
	case name == "":
		return "an empty header name is not supported"
	case strings.ContainsAny(name, "\x00\r\n"):
		return "a header name with NUL, CR or LF is not supported"
	case (name == ":scheme" || strings.HasPrefix(name, "grpc-")) && !b.target.kind.Can().GRPCHeaderPrincipals.Can():
		return fmt.Sprintf("header %q is not supported (%s)", name, b.target.kind.Can().GRPCHeaderPrincipals)
	}
	return ""
}

// httpPermission wraps the converter of an HTTP-only field: on TCP chains
// it cannot hold.
func (b *ruleBuilder) httpPermission(f permissionFunc) permissionFunc {
	if b.target.tcp {
		return func(string) (*rbacv3.Permission, string) { return nil, "HTTP-only fields are not enforced" }
	}
	return f
}

func (b *ruleBuilder) remoteIP(v string) (*rbacv3.Principal, string) {
	if lack := b.target.kind.Can().RemoteIP; !lack.Can() {
		return nil, string(lack)
	}
	c, why := authzCIDR(v)
	if why != "" {
		return nil, why
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: c}}, ""
}

func (b *ruleBuilder) pathPermission(v string) (*rbacv3.Permission, string) {
	if strings.Contains(v, "{*}") || strings.Contains(v, "{**}") {
		return nil, "path templates ({*}, {**}) are not supported"
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: authzString(v, false)},
	}}}, ""
}

func jwtAttribute(string) (*rbacv3.Principal, string) {
	return nil, "request principals (JWT) are not supported: meshfed has no RequestAuthentication"
}

// authenticated matches the URI SAN (SPIFFE ID) of the peer certificate.
func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{
		Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m},
	}}
}

// principalName matches an Istio principal "<td>/ns/<ns>/sa/<sa>" as the
// SPIFFE ID "spiffe://<td>/ns/<ns>/sa/<sa>"; "*" is any identity, a
// leading or trailing "*" any prefix or suffix.
func principalName(v string) (*rbacv3.Principal, string) {
	const scheme = "spiffe://"
	var m *matcherv3.StringMatcher
	switch {
	case v == "*":
		m = authzRegex(".+")
	case strings.HasPrefix(v, "*"):
		m = authzRegex(regexp.QuoteMeta(scheme) + ".*" + regexp.QuoteMeta(v[1:]))
	case strings.HasSuffix(v, "*"):
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: scheme + strings.TrimSuffix(v, "*")}}
	default:
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: scheme + v}}
	}
	return authenticated(m), ""
}

// namespacePrincipal matches the peers of namespace v: SPIFFE IDs holding
// "/ns/<v>/" ("*" in v: any run of characters but "/").
func namespacePrincipal(v string) (*rbacv3.Principal, string) {
	if v == "*" {
		return authenticated(authzRegex(".+")), ""
	}
	if !strings.Contains(v, "*") {
		return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "/ns/" + v + "/"}}), ""
	}
	return authenticated(authzRegex(".*/ns/" + authzWildcardRegex(v) + "/.*")), ""
}

// serviceAccountPrincipal matches "<ns>/<sa>" (or "<sa>" of the policy's
// namespace ns) as the SPIFFE ID of any trust domain.
func serviceAccountPrincipal(ns string) principalFunc {
	return func(v string) (*rbacv3.Principal, string) {
		n, sa, ok := strings.Cut(v, "/")
		if !ok {
			n, sa = ns, v
		}
		if n == "" || sa == "" || strings.Contains(sa, "/") {
			return nil, fmt.Sprintf("service account %q is not <namespace>/<name>", v)
		}
		return authenticated(authzRegex("spiffe://[^/]+/ns/" + regexp.QuoteMeta(n) + "/sa/" + regexp.QuoteMeta(sa))), ""
	}
}

// trustDomainPrincipal matches the SPIFFE IDs of trust domain v ("*" in
// v: any run of characters but "/").
func trustDomainPrincipal(v string) (*rbacv3.Principal, string) {
	if !strings.Contains(v, "*") {
		return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + v + "/"}}), ""
	}
	re := authzWildcardRegex(v)
	if v == "*" {
		re = "[^/]+"
	}
	return authenticated(authzRegex("spiffe://" + re + "/.*")), ""
}

func directRemoteIP(v string) (*rbacv3.Principal, string) {
	c, why := authzCIDR(v)
	if why != "" {
		return nil, why
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: c}}, ""
}

func destinationIP(v string) (*rbacv3.Permission, string) {
	c, why := authzCIDR(v)
	if why != "" {
		return nil, why
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: c}}, ""
}

func portPermission(v string) (*rbacv3.Permission, string) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		return nil, fmt.Sprintf("port %q is not a number from 1 to 65535", v)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}}, ""
}

func serverName(v string) (*rbacv3.Permission, string) {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: authzString(v, false)}}, ""
}

// hostPermission matches the authority, ignoring case.
func hostPermission(v string) (*rbacv3.Permission, string) {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: authzHeader(":authority", v, true)}}, ""
}

func methodPermission(v string) (*rbacv3.Permission, string) {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: authzHeader(":method", v, false)}}, ""
}

// authzHeader matches header name against v: "*" is presence, a
// leading or trailing "*" a suffix or prefix match.
func authzHeader(name, v string, ignoreCase bool) *routev3.HeaderMatcher {
	if v == "*" {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: authzString(v, ignoreCase)}}
}

// authzString is Istio's string match: "*" any non-empty string,
// "*x" suffix x, "x*" prefix x, else exactly v.
func authzString(v string, ignoreCase bool) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return authzRegex(".+")
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: v[1:]}, IgnoreCase: ignoreCase}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v[:len(v)-1]}, IgnoreCase: ignoreCase}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}, IgnoreCase: ignoreCase}
}

func authzRegex(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

// authzWildcardRegex quotes v, each "*" standing for any run of characters
// but "/".
func authzWildcardRegex(v string) string {
	parts := strings.Split(v, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, "[^/]*")
}

// authzCIDR parses an address or a CIDR block.
func authzCIDR(v string) (*corev3.CidrRange, string) {
	var p netip.Prefix
	if strings.Contains(v, "/") {
		var err error
		if p, err = netip.ParsePrefix(v); err != nil {
			return nil, fmt.Sprintf("%q is not an IP address or CIDR block", v)
		}
	} else {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Sprintf("%q is not an IP address or CIDR block", v)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, ""
}

func orIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	switch len(ids) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func andIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	ids = dropAnyID(ids)
	switch len(ids) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func orRules(rules []*rbacv3.Permission) *rbacv3.Permission {
	switch len(rules) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return rules[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: rules}}}
}

func andRules(rules []*rbacv3.Permission) *rbacv3.Permission {
	rules = dropAnyRule(rules)
	switch len(rules) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return rules[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: rules}}}
}

// dropAnyID leaves out the "any" terms of an AND.
func dropAnyID(ids []*rbacv3.Principal) []*rbacv3.Principal {
	var out []*rbacv3.Principal
	for _, id := range ids {
		if !id.GetAny() {
			out = append(out, id)
		}
	}
	return out
}

func dropAnyRule(rules []*rbacv3.Permission) []*rbacv3.Permission {
	var out []*rbacv3.Permission
	for _, r := range rules {
		if !r.GetAny() {
			out = append(out, r)
		}
	}
	return out
}
