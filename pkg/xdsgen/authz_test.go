package xdsgen

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbactcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// Expected RBAC trees, written by hand from Istio's AuthorizationPolicy
// reference and Envoy's RBAC API.

func smExact(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}
func smPrefix(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s}}
}
func smSuffix(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s}}
}
func smContains(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: s}}
}
func smRegex(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: s}}}
}
func smIgnoreCase(m *matcherv3.StringMatcher) *matcherv3.StringMatcher {
	m.IgnoreCase = true
	return m
}

func idAuthn(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}
func idAny() *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
}
func idAnd(ids ...*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}
func idOr(ids ...*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}
func idNot(id *rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
}
func cidrRange(addr string, bits uint32) *corev3.CidrRange {
	return &corev3.CidrRange{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(bits)}
}
func idDirect(addr string, bits uint32) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: cidrRange(addr, bits)}}
}
func idRemote(addr string, bits uint32) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: cidrRange(addr, bits)}}
}
func idHeader(name string, m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: &routev3.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}}}
}

func permAny() *rbacv3.Permission { return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}} }
func permAnd(ps ...*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
}
func permOr(ps ...*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}
func permNot(p *rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
}
func permPath(m *matcherv3.StringMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: m}}}}
}
func permPort(p uint32) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: p}}
}
func permHeader(name string, m *matcherv3.StringMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}}}
}
func permPresent(name string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}}}
}

func policy(perm *rbacv3.Permission, id *rbacv3.Principal) *rbacv3.Policy {
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{perm}, Principals: []*rbacv3.Principal{id}}
}

// mustAuthz decodes a YAML AuthorizationPolicy spec of demo/<name>.
func mustAuthz(t testing.TB, name, spec string) *istioconfig.AuthorizationPolicy {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(strings.TrimPrefix(spec, "\n")))
	if err != nil {
		t.Fatalf("yaml: %v", err)
	}
	p, err := decodeAuthz(name, j)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func decodeAuthz(name string, spec []byte) (*istioconfig.AuthorizationPolicy, error) {
	p, err := decodeAuthzUnchecked(name, spec)
	if err != nil {
		return nil, err
	}
	if errs := validate.Spec(p.Spec); len(errs) > 0 {
		return nil, fmt.Errorf("validate: %v", errs)
	}
	return p, nil
}

// decodeAuthzUnchecked decodes without validate.Spec: the generators must
// not break on what validation would refuse either.
func decodeAuthzUnchecked(name string, spec []byte) (*istioconfig.AuthorizationPolicy, error) {
	msg, errs := validate.DecodeSpec(validate.KindAuthorizationPolicy, spec)
	if len(errs) > 0 {
		return nil, fmt.Errorf("decode: %v", errs)
	}
	ap := msg.(*security.AuthorizationPolicy)
	return &istioconfig.AuthorizationPolicy{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindAuthorizationPolicy, Namespace: "demo", Name: name}},
		Spec: ap,
	}, nil
}

// httpRBACs unpacks the RBAC of each HTTP filter, checking names and type.
func httpRBACs(t testing.TB, fs []*hcmv3.HttpFilter) []*rbacv3.RBAC {
	t.Helper()
	var out []*rbacv3.RBAC
	for _, f := range fs {
		cfg := &rbachttpv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
			t.Fatalf("filter %s: %v", f.GetName(), err)
		}
		want := "envoy.filters.http.rbac." + strings.ToLower(cfg.GetRules().GetAction().String())
		if cfg.GetRules().GetAction() == rbacv3.RBAC_LOG {
			want = "envoy.filters.http.rbac.audit"
		}
		if f.GetName() != want {
			t.Errorf("filter name %q, want %q", f.GetName(), want)
		}
		out = append(out, cfg.GetRules())
	}
	return out
}

func tcpRBACs(t testing.TB, policies []*istioconfig.AuthorizationPolicy) []*rbacv3.RBAC {
	t.Helper()
	var out []*rbacv3.RBAC
	for _, f := range AuthzNetworkFilters(policies, Options{}) {
		cfg := &rbactcpv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
			t.Fatalf("filter %s: %v", f.GetName(), err)
		}
		if f.GetName() != "envoy.filters.network.rbac" || cfg.GetStatPrefix() != "tcp." {
			t.Errorf("network filter %q stat prefix %q", f.GetName(), cfg.GetStatPrefix())
		}
		out = append(out, cfg.GetRules())
	}
	return out
}

func actions(rs []*rbacv3.RBAC) []rbacv3.RBAC_Action {
	var out []rbacv3.RBAC_Action
	for _, r := range rs {
		out = append(out, r.GetAction())
	}
	return out
}

// policiesDiff describes how got differs from want, "" when not at all.
func policiesDiff(want, got map[string]*rbacv3.Policy) string {
	var b strings.Builder
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "missing %s\n", name)
		case !proto.Equal(w, g):
			fmt.Fprintf(&b, "%s:\n  got  %v\n  want %v\n", name, prototext.Format(g), prototext.Format(w))
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			fmt.Fprintf(&b, "unexpected %s: %v\n", name, prototext.Format(g))
		}
	}
	return b.String()
}

const rule0 = "ns-demo-policy-p-rule-0"

type authzMappingCase struct {
	name  string
	rules string // YAML of spec.rules
	want  *rbacv3.Policy
}

// authzMappingCases are one-rule ALLOW policies and the RBAC policy each
// becomes for Envoy.
func authzMappingCases() []authzMappingCase {
	spiffe := func(s string) *rbacv3.Principal { return idAuthn(smExact("spiffe://" + s)) }
	return []authzMappingCase{
		{"empty rule matches all", `[{}]`, policy(permAny(), idAny())},
		{"principals exact", `[{from: [{source: {principals: ["cluster.local/ns/a/sa/b"]}}]}]`,
			policy(permAny(), spiffe("cluster.local/ns/a/sa/b"))},
		{"principals OR within field", `[{from: [{source: {principals: ["td/ns/a/sa/b", "td/ns/a/sa/c"]}}]}]`,
			policy(permAny(), idOr(spiffe("td/ns/a/sa/b"), spiffe("td/ns/a/sa/c")))},
		{"principal wildcards", `[{from: [{source: {principals: ["*", "cluster.local/ns/a/*", "*/sa/b"]}}]}]`,
			policy(permAny(), idOr(
				idAuthn(smRegex(".+")),
				idAuthn(smPrefix("spiffe://cluster.local/ns/a/")),
				idAuthn(smRegex(`spiffe://.*/sa/b`))))},
		{"notPrincipals", `[{from: [{source: {notPrincipals: ["td/ns/a/sa/b"]}}]}]`,
			policy(permAny(), idNot(spiffe("td/ns/a/sa/b")))},
		{"namespaces", `[{from: [{source: {namespaces: ["prod", "te*"], notNamespaces: ["*"]}}]}]`,
			policy(permAny(), idAnd(
				idOr(idAuthn(smContains("/ns/prod/")), idAuthn(smRegex(`.*/ns/te[^/]*/.*`))),
				idNot(idAuthn(smRegex(".+")))))},
		{"serviceAccounts", `[{from: [{source: {serviceAccounts: ["web", "other/api"]}}]}]`,
			policy(permAny(), idOr(
				idAuthn(smRegex(`spiffe://[^/]+/ns/demo/sa/web`)),
				idAuthn(smRegex(`spiffe://[^/]+/ns/other/sa/api`))))},
		{"ipBlocks", `[{from: [{source: {ipBlocks: ["10.1.2.3", "10.2.0.0/16"], notIpBlocks: ["fd00:db8::/32"]}}]}]`,
			policy(permAny(), idAnd(
				idOr(idDirect("10.1.2.3", 32), idDirect("10.2.0.0", 16)),
				idNot(idDirect("fd00:db8::", 32))))},
		{"remoteIpBlocks", `[{from: [{source: {remoteIpBlocks: ["198.18.2.7/24"]}}]}]`,
			policy(permAny(), idRemote("198.18.2.0", 24))},
		{"fields of a source AND", `[{from: [{source: {principals: ["td/ns/a/sa/b"], ipBlocks: ["10.0.0.1"]}}]}]`,
			policy(permAny(), idAnd(spiffe("td/ns/a/sa/b"), idDirect("10.0.0.1", 32)))},
		{"from entries OR", `[{from: [{source: {namespaces: ["x"]}}, {source: {ipBlocks: ["10.0.0.1"]}}]}]`,
			policy(permAny(), idOr(idAuthn(smContains("/ns/x/")), idDirect("10.0.0.1", 32)))},
		{"paths", `[{to: [{operation: {paths: ["/a", "/b/*", "*.js", "*"]}}]}]`,
			policy(permOr(permPath(smExact("/a")), permPath(smPrefix("/b/")), permPath(smSuffix(".js")), permPath(smRegex(".+"))), idAny())},
		{"notPaths", `[{to: [{operation: {notPaths: ["/admin*"]}}]}]`,
			policy(permNot(permPath(smPrefix("/admin"))), idAny())},
		{"methods ports hosts AND", `[{to: [{operation: {methods: ["GET"], ports: ["8080"], hosts: ["Echo.demo", "*.example.com", "*"]}}]}]`,
			policy(permAnd(
				permOr(permHeader(":authority", smIgnoreCase(smExact("Echo.demo"))),
					permHeader(":authority", smIgnoreCase(smSuffix(".example.com"))),
					permPresent(":authority")),
				permPort(8080),
				permHeader(":method", smExact("GET"))), idAny())},
		{"notPorts notMethods", `[{to: [{operation: {notPorts: ["9090"], notMethods: ["DELETE"]}}]}]`,
			policy(permAnd(permNot(permPort(9090)), permNot(permHeader(":method", smExact("DELETE")))), idAny())},
		{"to entries OR", `[{to: [{operation: {paths: ["/a"]}}, {operation: {ports: ["80"]}}]}]`,
			policy(permOr(permPath(smExact("/a")), permPort(80)), idAny())},
		{"when conditions", `
- from: [{source: {namespaces: ["x"]}}]
  to: [{operation: {paths: ["/a"]}}]
  when:
  - {key: "request.headers[X-User]", values: ["alice", "bob*"]}
  - {key: source.ip, notValues: ["10.9.9.9"]}
  - {key: source.namespace, values: ["x"]}
  - {key: source.principal, values: ["td/ns/x/sa/y"]}
  - {key: destination.port, values: ["8080"], notValues: ["8081"]}
`,
			policy(
				permAnd(permPath(smExact("/a")), permPort(8080), permNot(permPort(8081))),
				idAnd(
					idAuthn(smContains("/ns/x/")),
					idOr(idHeader("x-user", smExact("alice")), idHeader("x-user", smPrefix("bob"))),
					idNot(idDirect("10.9.9.9", 32)),
					idAuthn(smContains("/ns/x/")),
					spiffe("td/ns/x/sa/y")))},
	}
}

// TestAuthzMapping: each field of a rule maps to its RBAC matcher, for an
// ALLOW policy on an Envoy sidecar.
func TestAuthzMapping(t *testing.T) {
	for _, tc := range authzMappingCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := mustAuthz(t, "p", "rules: "+tc.rules)
			rs := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{p}, ProxyEnvoy, Options{}))
			if len(rs) != 1 || rs[0].GetAction() != rbacv3.RBAC_ALLOW {
				t.Fatalf("got %v, want one ALLOW RBAC", actions(rs))
			}
			want := map[string]*rbacv3.Policy{rule0: tc.want}
			if d := policiesDiff(want, rs[0].GetPolicies()); d != "" {
				t.Errorf("policies:\n%s", d)
			}
			// grpc-go takes the same matchers, but for remote IPs (it
			// would match them against the peer): that rule is dropped.
			if strings.Contains(tc.name, "remote") {
				want = map[string]*rbacv3.Policy{}
			}
			grpc := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{p}, ProxyGRPC, Options{}))
			if d := policiesDiff(want, grpc[0].GetPolicies()); d != "" {
				t.Errorf("gRPC policies:\n%s", d)
			}
			for _, n := range AuthzNotes(p) {
				// Only TCP chains (HTTP-only fields) and gRPC (remote
				// IPs) leave something out here.
				if !strings.Contains(n.Reason, "TCP") && !(n.Kind == ProxyGRPC && strings.Contains(tc.name, "remote")) {
					t.Errorf("note %v, want none", n)
				}
			}
		})
	}
}

// TestAuthzOrder: AUDIT (Envoy only), then DENY, then ALLOW, whatever the
// order of the policies; CUSTOM (unsupported) denies everything.
func TestAuthzOrder(t *testing.T) {
	allow := mustAuthz(t, "a", `rules: [{to: [{operation: {paths: ["/ok"]}}]}]`)
	deny := mustAuthz(t, "d", `{action: DENY, rules: [{to: [{operation: {paths: ["/no"]}}]}]}`)
	audit := mustAuthz(t, "l", `{action: AUDIT, rules: [{}]}`)
	custom := mustAuthz(t, "c", `{action: CUSTOM, provider: {name: ext}, rules: [{}]}`)
	ps := []*istioconfig.AuthorizationPolicy{allow, audit, custom, deny}

	envoy := httpRBACs(t, AuthzHTTPFilters(ps, ProxyEnvoy, Options{}))
	if got, want := actions(envoy), []rbacv3.RBAC_Action{rbacv3.RBAC_LOG, rbacv3.RBAC_DENY, rbacv3.RBAC_ALLOW}; !slices.Equal(got, want) {
		t.Fatalf("Envoy actions %v, want %v", got, want)
	}
	denyAll := &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
		Principals:  []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}},
	}
	if d := policiesDiff(map[string]*rbacv3.Policy{"ns-demo-policy-d-rule-0": policy(permPath(smExact("/no")), idAny()),
		"ns-demo-policy-c-custom-unsupported": denyAll},
		envoy[1].GetPolicies()); d != "" {
		t.Errorf("DENY policies:\n%s", d)
	}
	if d := policiesDiff(map[string]*rbacv3.Policy{"ns-demo-policy-a-rule-0": policy(permPath(smExact("/ok")), idAny())},
		envoy[2].GetPolicies()); d != "" {
		t.Errorf("ALLOW policies:\n%s", d)
	}
	grpc := httpRBACs(t, AuthzHTTPFilters(ps, ProxyGRPC, Options{}))
	if got, want := actions(grpc), []rbacv3.RBAC_Action{rbacv3.RBAC_DENY, rbacv3.RBAC_ALLOW}; !slices.Equal(got, want) {
		t.Errorf("gRPC actions %v, want %v", got, want)
	}
	if got, want := actions(tcpRBACs(t, ps)), []rbacv3.RBAC_Action{rbacv3.RBAC_LOG, rbacv3.RBAC_DENY, rbacv3.RBAC_ALLOW}; !slices.Equal(got, want) {
		t.Errorf("TCP actions %v, want %v", got, want)
	}

	// Only DENY: nothing else is denied, so there is no ALLOW filter.
	if got := actions(httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{deny}, ProxyGRPC, Options{}))); !slices.Equal(got, []rbacv3.RBAC_Action{rbacv3.RBAC_DENY}) {
		t.Errorf("DENY only: %v", got)
	}
	for _, k := range []ProxyKind{ProxyEnvoy, ProxyGRPC} {
		rs := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{custom}, k, Options{}))
		if len(rs) != 1 || rs[0].GetAction() != rbacv3.RBAC_DENY ||
			policiesDiff(map[string]*rbacv3.Policy{"ns-demo-policy-c-custom-unsupported": denyAll}, rs[0].GetPolicies()) != "" {
			t.Errorf("CUSTOM only (%v): %v, want one DENY of everything", k, rs)
		}
	}
	if got := AuthzHTTPFilters(nil, ProxyEnvoy, Options{}); got != nil {
		t.Errorf("no policy: %v", got)
	}
	// Two policies of one action share the filter, one RBAC policy per rule.
	deny2 := mustAuthz(t, "e", `{action: DENY, rules: [{}, {from: [{source: {namespaces: ["bad"]}}]}]}`)
	rs := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{deny, deny2}, ProxyEnvoy, Options{}))
	if len(rs) != 1 {
		t.Fatalf("got %v, want one DENY", actions(rs))
	}
	var names []string
	for n := range rs[0].GetPolicies() {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"ns-demo-policy-d-rule-0", "ns-demo-policy-e-rule-0", "ns-demo-policy-e-rule-1"}; !slices.Equal(names, want) {
		t.Errorf("DENY policy names %q, want %q", names, want)
	}
}

// TestAuthzEmptyAllow: an ALLOW policy without rules denies everything
// (an ALLOW RBAC with no policy); one with an empty rule allows all; a
// DENY policy without rules denies nothing (no filter).
func TestAuthzEmptyAllow(t *testing.T) {
	for _, k := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
		rs := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{mustAuthz(t, "p", `{}`)}, k, Options{}))
		if len(rs) != 1 || rs[0].GetAction() != rbacv3.RBAC_ALLOW || len(rs[0].GetPolicies()) != 0 {
			t.Errorf("%v: empty ALLOW gave %v, want one ALLOW RBAC without policies", k, rs)
		}
		emptyDeny := &istioconfig.AuthorizationPolicy{Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY}}
		if got := AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{emptyDeny}, k, Options{}); got != nil {
			t.Errorf("%v: empty DENY gave %v, want none", k, got)
		}
	}
	rs := tcpRBACs(t, []*istioconfig.AuthorizationPolicy{mustAuthz(t, "p", `{}`)})
	if len(rs) != 1 || rs[0].GetAction() != rbacv3.RBAC_ALLOW || len(rs[0].GetPolicies()) != 0 {
		t.Errorf("TCP: empty ALLOW gave %v", rs)
	}
}

type noteWant struct {
	kind  ProxyKind
	field string
	why   string // substring of the reason
}

func checkNotes(t *testing.T, got []RouteNote, want []noteWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("notes %v, want %d", got, len(want))
		return
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != w.kind || g.Field != w.field || !strings.Contains(g.Reason, w.why) || g.Object.Name == "" {
			t.Errorf("note %d = %v, want %v %s ~%q", i, g, w.kind, w.field, w.why)
		}
	}
}

// TestAuthzGRPCFallback: what grpc-go cannot take is left out the safe way:
// an ALLOW rule with it matches nothing, a DENY rule ignores it (and so
// denies more); Envoy keeps it.
func TestAuthzGRPCFallback(t *testing.T) {
	allow := mustAuthz(t, "p", `
rules:
- from: [{source: {remoteIpBlocks: ["198.18.2.0/24"]}}]
- to: [{operation: {paths: ["/ok"]}}]
  when: [{key: "request.headers[grpc-timeout]", values: ["1S"]}]
- to: [{operation: {paths: ["/pkg.Svc/Get"]}}]
`)
	grpc := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{allow}, ProxyGRPC, Options{}))
	wantGRPC := map[string]*rbacv3.Policy{"ns-demo-policy-p-rule-2": policy(permPath(smExact("/pkg.Svc/Get")), idAny())}
	if d := policiesDiff(wantGRPC, grpc[0].GetPolicies()); d != "" {
		t.Errorf("gRPC ALLOW:\n%s", d)
	}
	envoy := httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{allow}, ProxyEnvoy, Options{}))
	wantEnvoy := map[string]*rbacv3.Policy{
		"ns-demo-policy-p-rule-0": policy(permAny(), idRemote("198.18.2.0", 24)),
		"ns-demo-policy-p-rule-1": policy(permPath(smExact("/ok")), idHeader("grpc-timeout", smExact("1S"))),
		"ns-demo-policy-p-rule-2": policy(permPath(smExact("/pkg.Svc/Get")), idAny()),
	}
	if d := policiesDiff(wantEnvoy, envoy[0].GetPolicies()); d != "" {
		t.Errorf("Envoy ALLOW:\n%s", d)
	}

	deny := mustAuthz(t, "d", `
action: DENY
rules:
- from: [{source: {remoteIpBlocks: ["198.18.2.0/24"], namespaces: ["x"]}}]
  to: [{operation: {paths: ["/admin*"]}}]
  when: [{key: connection.sni, values: ["x"]}]
`)
	grpc = httpRBACs(t, AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{deny}, ProxyGRPC, Options{}))
	wantDeny := map[string]*rbacv3.Policy{"ns-demo-policy-d-rule-0": policy(permPath(smPrefix("/admin")), idAuthn(smContains("/ns/x/")))}
	if d := policiesDiff(wantDeny, grpc[0].GetPolicies()); d != "" {
		t.Errorf("gRPC DENY:\n%s", d)
	}

	checkNotes(t, AuthzNotes(allow), []noteWant{
		{ProxyGRPC, "spec.rules[0].from[0].source.remoteIpBlocks", "ALLOW rule is left out"},
		{ProxyGRPC, "spec.rules[1].when[0]", "grpc-"},
		{ProxyEnvoy, "spec.rules[1].to[0].operation.paths", "TCP chains; the ALLOW rule is left out"},
		{ProxyEnvoy, "spec.rules[1].when[0]", "TCP"},
		{ProxyEnvoy, "spec.rules[2].to[0].operation.paths", "TCP"},
	})
	checkNotes(t, AuthzNotes(deny), []noteWant{
		{ProxyGRPC, "spec.rules[0].from[0].source.remoteIpBlocks", "denies more"},
		{ProxyGRPC, "spec.rules[0].when[0]", "connection.sni"},
		{ProxyEnvoy, "spec.rules[0].to[0].operation.paths", "TCP"},
	})
}

// TestAuthzTCP: on TCP chains an ALLOW rule with HTTP-only fields is
// dropped and a DENY rule loses them (it denies more), as in Istio.
func TestAuthzTCP(t *testing.T) {
	allow := mustAuthz(t, "p", `
rules:
- to: [{operation: {methods: ["GET"], ports: ["80"]}}]
- to: [{operation: {ports: ["81"]}}]
  from: [{source: {principals: ["td/ns/a/sa/b"]}}]
- when: [{key: "request.headers[x]", values: ["1"]}]
- from: [{source: {requestPrincipals: ["*"]}}]
`)
	rs := tcpRBACs(t, []*istioconfig.AuthorizationPolicy{allow})
	want := map[string]*rbacv3.Policy{"ns-demo-policy-p-rule-1": policy(permPort(81), idAuthn(smExact("spiffe://td/ns/a/sa/b")))}
	if len(rs) != 1 || rs[0].GetAction() != rbacv3.RBAC_ALLOW {
		t.Fatalf("got %v", actions(rs))
	}
	if d := policiesDiff(want, rs[0].GetPolicies()); d != "" {
		t.Errorf("TCP ALLOW:\n%s", d)
	}
	deny := mustAuthz(t, "d", `
action: DENY
rules:
- to: [{operation: {paths: ["/x"], hosts: ["h"], ports: ["80"]}}]
  from: [{source: {ipBlocks: ["10.0.0.0/8"]}}]
`)
	rs = tcpRBACs(t, []*istioconfig.AuthorizationPolicy{deny})
	want = map[string]*rbacv3.Policy{"ns-demo-policy-d-rule-0": policy(permPort(80), idDirect("10.0.0.0", 8))}
	if d := policiesDiff(want, rs[0].GetPolicies()); d != "" {
		t.Errorf("TCP DENY:\n%s", d)
	}
	checkNotes(t, AuthzNotes(deny), []noteWant{
		{ProxyEnvoy, "spec.rules[0].to[0].operation.hosts", "TCP chains; the DENY rule ignores"},
		{ProxyEnvoy, "spec.rules[0].to[0].operation.paths", "TCP chains; the DENY rule ignores"},
	})
}

// TestAuthzNotes: CUSTOM and (for gRPC) AUDIT are noted on spec.action;
// JWT fields are noted for every kind; ConfigNotes carries them.
func TestAuthzNotes(t *testing.T) {
	custom := mustAuthz(t, "c", `{action: CUSTOM, provider: {name: ext}, rules: [{}]}`)
	checkNotes(t, AuthzNotes(custom), []noteWant{
		{ProxyGRPC, "spec.action", "CUSTOM"},
		{ProxyEnvoy, "spec.action", "CUSTOM"},
	})
	audit := mustAuthz(t, "l", `{action: AUDIT, rules: [{}]}`)
	checkNotes(t, AuthzNotes(audit), []noteWant{{ProxyGRPC, "spec.action", "AUDIT"}})
	jwt := mustAuthz(t, "j", `{rules: [{from: [{source: {requestPrincipals: ["iss/sub"]}}]}]}`)
	want := []noteWant{
		{ProxyGRPC, "spec.rules[0].from[0].source.requestPrincipals", "JWT"},
		{ProxyEnvoy, "spec.rules[0].from[0].source.requestPrincipals", "JWT) are not supported: meshfed has no RequestAuthentication for Envoy;"},
		{ProxyEnvoy, "spec.rules[0].from[0].source.requestPrincipals", "for Envoy TCP chains"},
	}
	checkNotes(t, AuthzNotes(jwt), want)
	checkNotes(t, ConfigNotes(jwt, ""), want)
	if n := AuthzNotes(nil); n != nil {
		t.Errorf("AuthzNotes(nil) = %v", n)
	}
}

// grpcAccepts reports what of r grpc-go v1.85 would NACK or could not
// match (from internal/xds/rbac and internal/xds/httpfilter/rbac): only
// the matcher kinds its engine knows, no condition, no :scheme or grpc-*
// header, no empty prefix/suffix/contains, regexes Go compiles, no
// requested_server_name (it matches only "").
func grpcAccepts(r *rbacv3.RBAC) error {
	if a := r.GetAction(); a != rbacv3.RBAC_ALLOW && a != rbacv3.RBAC_DENY {
		return fmt.Errorf("action %v", a)
	}
	sm := func(m *matcherv3.StringMatcher) error {
		switch p := m.GetMatchPattern().(type) {
		case *matcherv3.StringMatcher_Exact:
		case *matcherv3.StringMatcher_Prefix:
			if p.Prefix == "" {
				return fmt.Errorf("empty prefix")
			}
		case *matcherv3.StringMatcher_Suffix:
			if p.Suffix == "" {
				return fmt.Errorf("empty suffix")
			}
		case *matcherv3.StringMatcher_Contains:
			if p.Contains == "" {
				return fmt.Errorf("empty contains")
			}
		case *matcherv3.StringMatcher_SafeRegex:
			if _, err := regexp.Compile(p.SafeRegex.GetRegex()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("string matcher %T", p)
		}
		return nil
	}
	hdr := func(h *routev3.HeaderMatcher) error {
		n := strings.ToLower(h.GetName())
		if n == ":scheme" || strings.HasPrefix(n, "grpc-") {
			return fmt.Errorf("header %q", n)
		}
		switch s := h.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_StringMatch:
			return sm(s.StringMatch)
		case *routev3.HeaderMatcher_PresentMatch:
			return nil
		}
		return fmt.Errorf("header matcher %T", h.GetHeaderMatchSpecifier())
	}
	var perm func(*rbacv3.Permission) error
	perm = func(p *rbacv3.Permission) error {
		switch r := p.GetRule().(type) {
		case *rbacv3.Permission_Any, *rbacv3.Permission_DestinationPort, *rbacv3.Permission_DestinationIp:
		case *rbacv3.Permission_AndRules:
			for _, x := range r.AndRules.GetRules() {
				if err := perm(x); err != nil {
					return err
				}
			}
		case *rbacv3.Permission_OrRules:
			for _, x := range r.OrRules.GetRules() {
				if err := perm(x); err != nil {
					return err
				}
			}
		case *rbacv3.Permission_NotRule:
			return perm(r.NotRule)
		case *rbacv3.Permission_Header:
			return hdr(r.Header)
		case *rbacv3.Permission_UrlPath:
			return sm(r.UrlPath.GetPath())
		default:
			return fmt.Errorf("permission %T", r)
		}
		return nil
	}
	var prin func(*rbacv3.Principal) error
	prin = func(p *rbacv3.Principal) error {
		switch r := p.GetIdentifier().(type) {
		case *rbacv3.Principal_Any, *rbacv3.Principal_DirectRemoteIp:
		case *rbacv3.Principal_AndIds:
			for _, x := range r.AndIds.GetIds() {
				if err := prin(x); err != nil {
					return err
				}
			}
		case *rbacv3.Principal_OrIds:
			for _, x := range r.OrIds.GetIds() {
				if err := prin(x); err != nil {
					return err
				}
			}
		case *rbacv3.Principal_NotId:
			return prin(r.NotId)
		case *rbacv3.Principal_Header:
			return hdr(r.Header)
		case *rbacv3.Principal_Authenticated_:
			if m := r.Authenticated.GetPrincipalName(); m != nil {
				return sm(m)
			}
		default:
			// remote_ip is accepted but means the peer address there.
			return fmt.Errorf("principal %T", r)
		}
		return nil
	}
	for name, pol := range r.GetPolicies() {
		if pol.GetCondition() != nil || pol.GetCheckedCondition() != nil {
			return fmt.Errorf("%s: condition", name)
		}
		for _, p := range pol.GetPermissions() {
			if err := perm(p); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		for _, p := range pol.GetPrincipals() {
			if err := prin(p); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// checkAuthz generates everything for policies and checks it against the
// protos' validation rules (inside the Any too) and, for gRPC, against
// what grpc-go accepts.
func checkAuthz(t *testing.T, policies []*istioconfig.AuthorizationPolicy) {
	t.Helper()
	for _, k := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
		fs := AuthzHTTPFilters(policies, k, Options{})
		seen := map[string]bool{}
		for _, f := range fs {
			if seen[f.GetName()] {
				t.Errorf("%v: duplicate filter name %q (grpc-go NACKs)", k, f.GetName())
			}
			seen[f.GetName()] = true
			if err := f.ValidateAll(); err != nil {
				t.Errorf("%v filter: %v", k, err)
			}
			cfg := &rbachttpv3.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
				t.Fatal(err)
			}
			if err := cfg.ValidateAll(); err != nil {
				t.Errorf("%v RBAC: %v\n%v", k, err, cfg)
			}
			if k == ProxyGRPC {
				if err := grpcAccepts(cfg.GetRules()); err != nil {
					t.Errorf("grpc-go would refuse: %v\n%v", err, cfg)
				}
			}
		}
	}
	for _, f := range AuthzNetworkFilters(policies, Options{}) {
		if err := f.ValidateAll(); err != nil {
			t.Errorf("network filter: %v", err)
		}
		cfg := &rbactcpv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Errorf("network RBAC: %v\n%v", err, cfg)
		}
	}
	for _, p := range policies {
		for _, n := range AuthzNotes(p) {
			if n.Field == "" || n.Reason == "" {
				t.Errorf("empty note %v", n)
			}
		}
	}
}

// authzSeeds are policies touching every field, valid or not.
var authzSeeds = []string{
	`{}`,
	`{"action":"DENY"}`,
	`{"rules":[{}]}`,
	`{"action":"AUDIT","rules":[{"from":[{"source":{"principals":["*"]}}]}]}`,
	`{"action":"CUSTOM","provider":{"name":"x"},"rules":[{}]}`,
	`{"rules":[{"from":[{"source":{"principals":["a","*b","c*",""],"notPrincipals":["*"],"requestPrincipals":["i/s"],"notRequestPrincipals":["*"],"namespaces":["n","*","a*b"],"notNamespaces":["x"],"ipBlocks":["127.0.0.4","10.0.0.0/8","::1","bad"],"notIpBlocks":["fe80::/10"],"remoteIpBlocks":["127.0.0.8"],"notRemoteIpBlocks":["127.0.9.0/24"]}}]}]}`,
	`{"action":"DENY","rules":[{"from":[{"source":{"serviceAccounts":["sa","ns/sa","a/b/c","/x"],"notServiceAccounts":["ns/"],"trustDomains":["td","*","t*"],"notTrustDomains":["*d"]}}]}]}`,
	`{"rules":[{"to":[{"operation":{"hosts":["h","*.h","h*","*"],"notHosts":["x"],"ports":["80","0","70000","x"],"notPorts":["81"],"methods":["GET","*"],"notMethods":["PUT"],"paths":["/a","/b*","*c","*","/{*}/x","/{**}"],"notPaths":["/z"]}}]}]}`,
	`{"action":"DENY","rules":[{"when":[{"key":"request.headers[X-A]","values":["1","*"]},{"key":"request.headers[]","values":["1"]},{"key":"request.headers[grpc-x]","values":["1"]},{"key":"request.headers[:scheme]","notValues":["http"]},{"key":"source.ip","values":["127.0.0.11"]},{"key":"remote.ip","values":["127.0.0.12"]},{"key":"source.namespace","values":["n"]},{"key":"source.principal","values":["p"]},{"key":"source.serviceAccount","values":["s"]},{"key":"destination.ip","values":["127.0.0.13"]},{"key":"destination.port","values":["443"]},{"key":"connection.sni","values":["*.x"]},{"key":"request.auth.claims[iss]","values":["i"]},{"key":"experimental.envoy.filters.a[b]","values":["c"]},{"key":"nonsense","values":["x"]},{"key":"source.ip"}]}]}`,
	`{"rules":[{"when":[{"key":"request.headers[a\nb]","values":["1"]}],"to":[{"operation":{"paths":[""]}}]}]}`,
}

// TestAuthzValidate: every generated filter passes ValidateAll and, for
// gRPC, what grpc-go accepts, for the seeds and the mapping cases.
func TestAuthzValidate(t *testing.T) {
	var all []*istioconfig.AuthorizationPolicy
	for i, s := range authzSeeds {
		p, err := decodeAuthzUnchecked(fmt.Sprintf("s%d", i), []byte(s))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		checkAuthz(t, []*istioconfig.AuthorizationPolicy{p})
		all = append(all, p)
	}
	checkAuthz(t, all)
	// Recipes, unvalidated: whatever validation lets through later, the
	// output stays valid.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		data := make([]byte, 200)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		p := &istioconfig.AuthorizationPolicy{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindAuthorizationPolicy, Namespace: "demo", Name: fmt.Sprint("r", i)}},
			Spec: recipePolicy(data),
		}
		checkAuthz(t, []*istioconfig.AuthorizationPolicy{p})
	}
}

func FuzzAuthzFilters(f *testing.F) {
	for _, s := range authzSeeds {
		f.Add([]byte(s))
	}
	for _, tc := range authzMappingCases() {
		j, err := yaml.YAMLToJSON([]byte("rules: " + tc.rules))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Fuzz(func(t *testing.T, spec []byte) {
		p, err := decodeAuthz("f", spec)
		if err != nil {
			// Not a JSON spec: read the bytes as the recipe of a policy.
			p = &istioconfig.AuthorizationPolicy{
				Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindAuthorizationPolicy, Namespace: "demo", Name: "r"}},
				Spec: recipePolicy(spec),
			}
			if errs := validate.Spec(p.Spec); len(errs) > 0 {
				t.Skip()
			}
		}
		checkAuthz(t, []*istioconfig.AuthorizationPolicy{p})
		// Determinism: a second generation is the same.
		a := AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{p}, ProxyEnvoy, Options{})
		b := AuthzHTTPFilters([]*istioconfig.AuthorizationPolicy{p}, ProxyEnvoy, Options{})
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				t.Errorf("filter %d differs between two generations", i)
			}
		}
	})
}

// fuzzValues are the values a recipe picks from: wildcards, addresses,
// ports, header names and characters at the edges of what is valid.
var fuzzValues = []string{
	"", "*", "a*", "*a", "a*b", "**", "a", "GET", "/pkg.Svc/Get", "/{*}/x", "/{**}",
	"10.0.0.1", "10.0.0.0/8", "10.0.0.0/33", "::1", "fe80::1%eth0", "fd00:db8::/129",
	"80", "0", "65536", "-1", "ns/sa", "a/b/c", "/", "(", "\\", "é", "x\ny", "\x00",
	"cluster.local/ns/demo/sa/web", "td/*",
}

var fuzzKeys = []string{
	"source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount",
	"destination.ip", "destination.port", "connection.sni", "request.auth.principal",
	"request.headers[x-a]", "request.headers[grpc-x]", "request.headers[:scheme]", "request.headers[Host]",
	"request.headers[]", "request.headers[a\nb]", "experimental.envoy.filters.a[b]", "other",
}

// recipePolicy builds a policy from data, each byte choosing the next
// element: the action, then rules with sources, operations and conditions.
func recipePolicy(data []byte) *security.AuthorizationPolicy {
	next := func(n int) int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b) % n
	}
	vals := func() []string {
		var out []string
		for range next(3) {
			out = append(out, fuzzValues[next(len(fuzzValues))])
		}
		return out
	}
	ap := &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_Action(next(5))}
	for range next(3) {
		r := &security.Rule{}
		for range next(3) {
			r.From = append(r.From, &security.Rule_From{Source: &security.Source{
				Principals: vals(), NotPrincipals: vals(), RequestPrincipals: vals(), NotRequestPrincipals: vals(),
				Namespaces: vals(), NotNamespaces: vals(), ServiceAccounts: vals(), NotServiceAccounts: vals(),
				TrustDomains: vals(), NotTrustDomains: vals(), IpBlocks: vals(), NotIpBlocks: vals(),
				RemoteIpBlocks: vals(), NotRemoteIpBlocks: vals(),
			}})
		}
		for range next(3) {
			r.To = append(r.To, &security.Rule_To{Operation: &security.Operation{
				Hosts: vals(), NotHosts: vals(), Ports: vals(), NotPorts: vals(),
				Methods: vals(), NotMethods: vals(), Paths: vals(), NotPaths: vals(),
			}})
		}
		for range next(3) {
			r.When = append(r.When, &security.Condition{Key: fuzzKeys[next(len(fuzzKeys))], Values: vals(), NotValues: vals()})
		}
		ap.Rules = append(ap.Rules, r)
	}
	return ap
}
