package validate_test

import (
	"encoding/json"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

func TestPeerAuthentication(t *testing.T) {
	runCases(t, validate.KindPeerAuthentication, []specCase{
		{name: "valid mesh or namespace wide", spec: `mtls: {mode: STRICT}`},
		{name: "valid empty (inherits)", spec: `{}`},
		{name: "valid workload with ports", spec: `
selector: {matchLabels: {app: reviews, version: v1}}
mtls: {mode: PERMISSIVE}
portLevelMtls:
  8080: {mode: DISABLE}
  "9090": {mode: STRICT}
  1: {mode: PERMISSIVE}
  65535: {mode: STRICT}
`},
		{name: "valid explicit UNSET at the top", spec: `mtls: {mode: UNSET}`},
		{name: "port level without selector", spec: `
mtls: {mode: STRICT}
portLevelMtls: {8080: {mode: DISABLE}}
`, want: []string{
			"spec.portLevelMtls: portLevelMtls requires a workload selector (selector.matchLabels): a mesh- or namespace-wide policy cannot set port-level mTLS",
		}},
		{name: "port level with a selector without labels", spec: `
selector: {}
portLevelMtls: {8080: {mode: DISABLE}}
`, want: []string{
			"spec.portLevelMtls: portLevelMtls requires a workload selector (selector.matchLabels): a mesh- or namespace-wide policy cannot set port-level mTLS",
		}},
		{name: "ports and modes", spec: `
selector: {matchLabels: {app: a}}
portLevelMtls:
  70000: {mode: STRICT}
  0: {mode: STRICT}
  8080: {}
  8081: {mode: UNSET}
  8082: {mode: 7}
`, want: []string{
			// In port order.
			"spec.portLevelMtls[0]: must be between 1 and 65535, got 0",
			"spec.portLevelMtls[8080].mode: required (DISABLE, PERMISSIVE or STRICT)",
			"spec.portLevelMtls[8081].mode: required (DISABLE, PERMISSIVE or STRICT)",
			"spec.portLevelMtls[8082].mode: unknown mode 7 (one of UNSET, DISABLE, PERMISSIVE, STRICT)",
			"spec.portLevelMtls[70000]: must be between 1 and 65535, got 70000",
		}},
		{name: "numeric mode out of range", spec: `mtls: {mode: 9}`, want: []string{
			"spec.mtls.mode: unknown mode 9 (one of UNSET, DISABLE, PERMISSIVE, STRICT)",
		}},
		{name: "numeric mode in range", spec: `mtls: {mode: 3}`},
		{name: "selector labels", spec: `selector: {matchLabels: {app: "v*"}}`, want: []string{
			`spec.selector.matchLabels[app]: invalid label value "v*": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		}},
		{name: "decoder: unknown fields", spec: `
mtls: {mod: STRICT}
selector: {labels: {app: a}}
`, want: []string{
			"spec.mtls.mod: unknown field",
			"spec.selector.labels: unknown field",
		}},
		{name: "decoder: unknown mode name", spec: `mtls: {mode: MAYBE}`, want: []string{
			`spec.mtls.mode: unknown value "MAYBE" (one of UNSET, DISABLE, PERMISSIVE, STRICT)`,
		}},
		{name: "decoder: port key not a number", spec: `
selector: {matchLabels: {app: a}}
portLevelMtls: {http: {mode: STRICT}}
`, want: []string{`spec: invalid value for uint32 key: "http"`}},
	})
}

// conditionKeysHelp is the list of supported keys the validator prints
// with an unknown key: Istio's condition keys
// (https://istio.io/latest/docs/reference/config/security/conditions/).
const conditionKeysHelp = "request.headers[<name>], source.ip, remote.ip, source.namespace, source.principal, " +
	"source.serviceAccount, request.auth.principal, request.auth.audiences, request.auth.presenter, " +
	"request.auth.claims[<name>], destination.ip, destination.port, connection.sni, experimental.envoy.filters.*[<key>]"

func TestAuthorizationPolicy(t *testing.T) {
	const denyNoRules = "spec.rules: required with action DENY: without rules the policy never applies (write rules: [{}] to match every request)"
	runCases(t, validate.KindAuthorizationPolicy, []specCase{
		{name: "valid ALLOW with every kind of match", spec: `
selector: {matchLabels: {app: reviews}}
action: ALLOW
rules:
- from:
  - source:
      principals: [cluster.local/ns/default/sa/productpage, "*/ns/prod/*"]
      notRequestPrincipals: ["*"]
      ipBlocks: [10.0.0.0/8, 198.18.113.4, "fd00:db8::/32"]
      notRemoteIpBlocks: ["::1"]
  - source: {serviceAccounts: [default/sleep, sleep], trustDomains: [cluster.local]}
  to:
  - operation:
      methods: [GET, HEAD]
      paths: ["/api/*", "*/info", "/v1/{*}/items/{**}", "/{**}/b", "/foo/{**}/"]
      ports: ["8080", "1", "65535"]
      hosts: ["*.example.com"]
  when:
  - {key: "request.auth.claims[iss]", values: [https://accounts.example.com]}
  - {key: "request.headers[x-user]", notValues: [mallory]}
  - {key: destination.port, values: ["9080"]}
  - {key: source.ip, notValues: [10.1.0.0/16]}
  - {key: remote.ip, values: [198.18.3.4/24]}
  - {key: destination.ip, values: ["::1"]}
  - {key: source.namespace, values: [prod]}
  - {key: source.principal, values: [cluster.local/ns/prod/sa/a]}
  - {key: source.serviceAccount, values: [prod/a]}
  - {key: request.auth.principal, values: [issuer/subject]}
  - {key: request.auth.audiences, values: [a]}
  - {key: request.auth.presenter, values: [b]}
  - {key: connection.sni, values: [a.example.com]}
  - {key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]"]}
`},
		{name: "ALLOW without rules denies all: valid", spec: `selector: {matchLabels: {app: a}}`},
		{name: "empty spec: valid (allow nothing in the namespace)", spec: `{}`},
		{name: "one empty rule allows all: valid", spec: `rules: [{}]`},
		{name: "DENY all with one empty rule: valid", spec: `{action: DENY, rules: [{}]}`},
		{name: "AUDIT without rules: valid", spec: `{action: AUDIT}`},
		{name: "DENY without rules", spec: `{action: DENY}`, want: []string{denyNoRules}},
		{name: "DENY with an empty list of rules", spec: `{action: DENY, rules: []}`, want: []string{denyNoRules}},
		{name: "CUSTOM valid", spec: `
action: CUSTOM
provider: {name: ext-authz}
rules: [{to: [{operation: {paths: [/admin]}}], when: [{key: "request.headers[x-a]", values: [b]}]}]
`},
		{name: "CUSTOM without provider nor rules", spec: `{action: CUSTOM}`, want: []string{
			"spec.provider.name: required with action CUSTOM (the extension provider of the mesh config that decides)",
			"spec.rules: required with action CUSTOM: without rules the policy never applies (write rules: [{}] to match every request)",
		}},
		{name: "CUSTOM with an empty provider name", spec: `{action: CUSTOM, provider: {}, rules: [{}]}`, want: []string{
			"spec.provider.name: required with action CUSTOM (the extension provider of the mesh config that decides)",
		}},
		{name: "CUSTOM does not match on identities", spec: `
action: CUSTOM
provider: {name: ext-authz}
rules:
- from:
  - source: {principals: [a], ipBlocks: [198.18.3.4], notNamespaces: [b]}
  - source: {notServiceAccounts: [c], remoteIpBlocks: [10.0.0.0/8]}
  when:
  - {key: source.namespace, values: [x]}
  - {key: "request.auth.claims[iss]", values: [x]}
  - {key: source.ip, values: [198.18.3.4]}
`, want: []string{
			"spec.rules[0].from[0].source.principals: not supported with action CUSTOM",
			"spec.rules[0].from[0].source.notNamespaces: not supported with action CUSTOM",
			"spec.rules[0].from[1].source.notServiceAccounts: not supported with action CUSTOM",
			`spec.rules[0].when[0].key: "source.namespace" is not supported with action CUSTOM`,
			`spec.rules[0].when[1].key: "request.auth.claims[iss]" is not supported with action CUSTOM`,
		}},
		{name: "numeric action out of range", spec: `{action: 5, provider: {name: x}}`, want: []string{
			"spec.action: unknown action 5 (one of ALLOW, DENY, AUDIT, CUSTOM)",
		}},
		{name: "selector and targetRef", spec: `
selector: {matchLabels: {app: a}}
targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}
`, want: []string{"spec: only one of selector, targetRef or targetRefs may be set"}},
		{name: "targetRef and targetRefs", spec: `
targetRef: {kind: Service, name: a}
targetRefs: [{kind: Service, name: b}]
`, want: []string{"spec: only one of selector, targetRef or targetRefs may be set"}},
		{name: "targetRefs", spec: `
targetRefs:
- {kind: Service, name: reviews}
- {group: apps, kind: Deployment, name: x}
- {kind: Service}
- {name: a, namespace: other}
- {group: core, kind: Service, name: a}
- {group: networking.istio.io, kind: ServiceEntry, name: api}
- {group: gateway.networking.k8s.io, kind: GatewayClass, name: istio-waypoint}
- {group: networking.istio.io, kind: Service, name: a}
`, want: []string{
			`spec.targetRefs[1]: group "apps" kind "Deployment" cannot be targeted: one of Service (core group), ServiceEntry (networking.istio.io), Gateway or GatewayClass (gateway.networking.k8s.io)`,
			"spec.targetRefs[2].name: required",
			"spec.targetRefs[3].kind: required",
			"spec.targetRefs[3].namespace: must not be set: cross-namespace references are not supported (the policy's own namespace is used)",
			`spec.targetRefs[7]: group "networking.istio.io" kind "Service" cannot be targeted: one of Service (core group), ServiceEntry (networking.istio.io), Gateway or GatewayClass (gateway.networking.k8s.io)`,
		}},
		{name: "sources", spec: `
rules:
- from:
  - source: {}
  - {}
  - source:
      principals: ["", a]
      notPrincipals: [""]
      requestPrincipals: [""]
      namespaces: [""]
      notNamespaces: [""]
      ipBlocks: [10.0.0.0/33, 1.2.3]
      notIpBlocks: ["::1/129"]
      remoteIpBlocks: [x]
      notRemoteIpBlocks: [""]
  - source:
      serviceAccounts: [default/sa, "ns/*", a/b/c, Bad_NS/x]
      namespaces: [default]
`, want: []string{
			"spec.rules[0].from[0].source: at least one field is required (e.g. principals, namespaces, serviceAccounts, ipBlocks)",
			"spec.rules[0].from[1].source: required",
			"spec.rules[0].from[2].source.principals[0]: must not be empty",
			"spec.rules[0].from[2].source.notPrincipals[0]: must not be empty",
			"spec.rules[0].from[2].source.requestPrincipals[0]: must not be empty",
			"spec.rules[0].from[2].source.namespaces[0]: must not be empty",
			"spec.rules[0].from[2].source.notNamespaces[0]: must not be empty",
			`spec.rules[0].from[2].source.ipBlocks[0]: "10.0.0.0/33" is not an IP address or CIDR`,
			`spec.rules[0].from[2].source.ipBlocks[1]: "1.2.3" is not an IP address or CIDR`,
			`spec.rules[0].from[2].source.notIpBlocks[0]: "::1/129" is not an IP address or CIDR`,
			`spec.rules[0].from[2].source.remoteIpBlocks[0]: "x" is not an IP address or CIDR`,
			"spec.rules[0].from[2].source.notRemoteIpBlocks[0]: must not be empty",
			`spec.rules[0].from[3].source.serviceAccounts[1]: "ns/*": wildcards are not allowed in service accounts`,
			`spec.rules[0].from[3].source.serviceAccounts[2]: "a/b/c" must be "namespace/serviceaccount" or "serviceaccount"`,
			`spec.rules[0].from[3].source.serviceAccounts[3]: "Bad_NS/x": "Bad_NS" is not a namespace name`,
			"spec.rules[0].from[3].source: serviceAccounts cannot be combined with principals or namespaces (nor their not* forms)",
		}},
		{name: "operations", spec: `
rules:
- {}
- to:
  - operation: {}
  - {}
  - operation:
      hosts: [""]
      notHosts: [""]
      ports: ["80", "0", "65536", http, ""]
      notPorts: ["-1"]
      methods: [""]
      notMethods: [""]
      paths: ["", "/a/{*}/{**}", "/{**}/{*}", "/a/{*}.txt", "/*/b/{*}", "/a/{x}/{*}"]
      notPaths: ["/x*", "/{**}/{**}"]
`, want: []string{
			"spec.rules[1].to[0].operation: at least one field is required (e.g. paths, methods, ports, hosts)",
			"spec.rules[1].to[1].operation: required",
			"spec.rules[1].to[2].operation.hosts[0]: must not be empty",
			"spec.rules[1].to[2].operation.notHosts[0]: must not be empty",
			`spec.rules[1].to[2].operation.ports[1]: "0" must be a port number between 1 and 65535`,
			`spec.rules[1].to[2].operation.ports[2]: "65536" must be a port number between 1 and 65535`,
			`spec.rules[1].to[2].operation.ports[3]: "http" must be a port number between 1 and 65535`,
			"spec.rules[1].to[2].operation.ports[4]: must not be empty",
			`spec.rules[1].to[2].operation.notPorts[0]: "-1" must be a port number between 1 and 65535`,
			"spec.rules[1].to[2].operation.methods[0]: must not be empty",
			"spec.rules[1].to[2].operation.notMethods[0]: must not be empty",
			"spec.rules[1].to[2].operation.paths[0]: must not be empty",
			`spec.rules[1].to[2].operation.paths[2]: "/{**}/{*}": {**} must be the last operator of a path template`,
			`spec.rules[1].to[2].operation.paths[3]: "/a/{*}.txt": in a path template each {*} or {**} must be a whole segment, and '*', '{', '}' may appear nowhere else`,
			`spec.rules[1].to[2].operation.paths[4]: "/*/b/{*}": in a path template each {*} or {**} must be a whole segment, and '*', '{', '}' may appear nowhere else`,
			`spec.rules[1].to[2].operation.paths[5]: "/a/{x}/{*}": in a path template each {*} or {**} must be a whole segment, and '*', '{', '}' may appear nowhere else`,
			`spec.rules[1].to[2].operation.notPaths[1]: "/{**}/{**}": {**} must be the last operator of a path template`,
		}},
		{name: "conditions", spec: `
rules:
- when:
  - {key: "", values: [a]}
  - {key: "request.headers[x-user]"}
  - {key: foo.bar, values: [a]}
  - {key: request.headers, values: [a]}
  - {key: "request.headers[]", values: [a]}
  - {key: "request.headersx[a]", values: [a]}
  - {key: "request.auth.claims[iss]", values: [""]}
  - {key: destination.port, values: ["80", http], notValues: ["0"]}
  - {key: source.ip, values: [10.0.0.0/8, bad]}
  - {key: "destination.labels[app]", values: [a]}
  - {key: destination.namespace, values: [a]}
  - {key: "experimental.envoy.filters.[x]", values: [x]}
  - {key: experimental.envoy.filters.network.mysql_proxy, values: [x]}
  - {key: destination.name, values: [a]}
`, want: []string{
			"spec.rules[0].when[0].key: required",
			"spec.rules[0].when[1]: values or notValues is required",
			`spec.rules[0].when[2].key: unknown condition key "foo.bar" (one of ` + conditionKeysHelp + `)`,
			`spec.rules[0].when[3].key: "request.headers" must be of the form request.headers[<name>]`,
			`spec.rules[0].when[4].key: "request.headers[]" must be of the form request.headers[<name>]`,
			`spec.rules[0].when[5].key: "request.headersx[a]" must be of the form request.headers[<name>]`,
			"spec.rules[0].when[6].values[0]: must not be empty",
			`spec.rules[0].when[7].values[1]: "http" must be a port number between 1 and 65535`,
			`spec.rules[0].when[7].notValues[0]: "0" must be a port number between 1 and 65535`,
			`spec.rules[0].when[8].values[1]: "bad" is not an IP address or CIDR`,
			`spec.rules[0].when[9].key: "destination.labels[app]" is not supported: use the policy's selector`,
			`spec.rules[0].when[10].key: "destination.namespace" is not supported: the policy applies in its own namespace (metadata.namespace)`,
			`spec.rules[0].when[11].key: "experimental.envoy.filters.[x]" must be of the form experimental.envoy.filters.<filter>[<key>]`,
			`spec.rules[0].when[12].key: "experimental.envoy.filters.network.mysql_proxy" must be of the form experimental.envoy.filters.<filter>[<key>]`,
			`spec.rules[0].when[13].key: "destination.name" is not supported: it was only supported by the v1alpha1 RBAC API`,
		}},
		{name: "decoder: unknown action, misspelt field", spec: `
action: ALOW
rules: [{from: [{source: {principal: [a]}}]}]
`, want: []string{
			`spec.action: unknown value "ALOW" (one of ALLOW, DENY, AUDIT, CUSTOM)`,
			"spec.rules[0].from[0].source.principal: unknown field",
		}},
	})
}

// TestAuthorizationPolicyProvider: a provider goes with CUSTOM only.
func TestAuthorizationPolicyProvider(t *testing.T) {
	runCases(t, validate.KindAuthorizationPolicy, []specCase{
		{name: "DENY", spec: `{action: DENY, provider: {name: x}, rules: [{}]}`, want: []string{
			"spec.provider: only allowed with action CUSTOM, not DENY",
		}},
		{name: "ALLOW by default", spec: `{provider: {name: x}}`, want: []string{
			"spec.provider: only allowed with action CUSTOM, not ALLOW",
		}},
	})
}

// TestSecurityNil: messages built in Go (not decoded, which refuses
// nulls) may hold nil elements; each is reported at its path.
func TestSecurityNil(t *testing.T) {
	ap := &security.AuthorizationPolicy{
		TargetRefs: []*typev1beta1.PolicyTargetReference{nil},
		Rules: []*security.Rule{nil, {
			From: []*security.Rule_From{nil},
			To:   []*security.Rule_To{nil},
			When: []*security.Condition{nil},
		}},
	}
	want := []string{
		"spec.targetRefs[0]: must not be null",
		"spec.rules[0]: must not be null",
		"spec.rules[1].from[0]: must not be null",
		"spec.rules[1].to[0]: must not be null",
		"spec.rules[1].when[0]: must not be null",
	}
	if got := errorStrings(validate.Spec(ap)); !slices.Equal(got, want) {
		t.Errorf("AuthorizationPolicy:\n  got  %q\n  want %q", got, want)
	}
	pa := &security.PeerAuthentication{
		Selector:      &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}},
		PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{8080: nil},
	}
	want = []string{"spec.portLevelMtls[8080]: required"}
	if got := errorStrings(validate.Spec(pa)); !slices.Equal(got, want) {
		t.Errorf("PeerAuthentication:\n  got  %q\n  want %q", got, want)
	}
}

// TestSecurityObject: whole objects of the security kinds go through
// Object as the webhook and the hub pass them.
func TestSecurityObject(t *testing.T) {
	for _, tc := range []struct {
		kind, raw string
		want      []string
	}{
		{validate.KindPeerAuthentication, `{"apiVersion":"security.istio.io/v1","kind":"PeerAuthentication",` +
			`"metadata":{"name":"default","namespace":"istio-system"},"spec":{"mtls":{"mode":"STRICT"}}}`, nil},
		{validate.KindAuthorizationPolicy, `{"apiVersion":"security.istio.io/v1beta1","kind":"AuthorizationPolicy",` +
			`"metadata":{"name":"deny"},"spec":{"action":"DENY"}}`,
			[]string{"spec.rules: required with action DENY: without rules the policy never applies (write rules: [{}] to match every request)"}},
		{validate.KindAuthorizationPolicy, `{"metadata":{"name":"x"}}`, []string{"spec: required"}},
	} {
		if got := errorStrings(validate.Object(tc.kind, []byte(tc.raw))); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s:\n  got  %q\n  want %q", tc.kind, tc.raw, got, tc.want)
		}
	}
}

func errorStrings(l validate.ErrorList) []string {
	var out []string
	for _, e := range l {
		out = append(out, e.Error())
	}
	return out
}

// checkRoundTrip is FuzzObject's property: validating any object never
// panics, and the spec of an object that passes decodes to the same
// message, and passes again, after a round trip through protojson (what
// the hub does when it stores and re-reads a validated spec).
func checkRoundTrip(t *testing.T, kind string, raw []byte) {
	t.Helper()
	if errs := validate.Object(kind, raw); len(errs) > 0 {
		return
	}
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("valid object is not JSON: %v", err)
	}
	msg, errs := validate.DecodeSpec(kind, obj.Spec)
	if len(errs) > 0 {
		t.Fatalf("valid object's spec does not decode: %v", errs)
	}
	again, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	msg2, errs := validate.DecodeSpec(kind, again)
	if len(errs) == 0 {
		errs = validate.Spec(msg2)
	}
	if len(errs) > 0 || !proto.Equal(msg, msg2) {
		t.Fatalf("round trip of %s: %s -> %s: %v", kind, obj.Spec, again, errs)
	}
}
