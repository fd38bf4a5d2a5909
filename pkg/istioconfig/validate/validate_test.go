package validate_test

import (
	"errors"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

type specCase struct {
	name string
	spec string   // YAML
	want []string // every FieldError, in order; none means valid
}

func runCases(t *testing.T, kind string, cases []specCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			js, err := yaml.YAMLToJSON([]byte(tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			msg, errs := validate.DecodeSpec(kind, js)
			if len(errs) == 0 {
				errs = validate.Spec(msg)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n  got  %q\n  want %q", got, tc.want)
			}
			if len(errs) > 0 && !errors.Is(errs, validate.ErrInvalid) {
				t.Errorf("ErrorList does not wrap ErrInvalid")
			}
		})
	}
}

func TestVirtualService(t *testing.T) {
	runCases(t, validate.KindVirtualService, []specCase{
		{name: "valid split", spec: `
hosts: [reviews]
http:
- name: canary
  match:
  - uri: {prefix: /api}
    headers:
      x-user: {exact: alice}
      x-debug: {}
  route:
  - destination: {host: reviews, subset: v1, port: {number: 9080}}
    weight: 90
  - destination: {host: reviews.default.svc.cluster.local, subset: v2}
    weight: 10
  timeout: 5s
  retries: {attempts: 3, perTryTimeout: 2s}
`},
		{name: "valid tcp and tls with gateway", spec: `
hosts: ["*.example.com"]
gateways: [istio-system/ingress]
tcp:
- match: [{port: 3306, destinationSubnets: [10.0.0.0/8]}]
  route: [{destination: {host: mysql.db.svc.cluster.local}}]
tls:
- match: [{sniHosts: [a.example.com], port: 443}]
  route: [{destination: {host: a.default.svc.cluster.local}}]
`},
		{name: "missing destination host", spec: `
hosts: [reviews]
http:
- route:
  - destination: {host: reviews}
    weight: 50
  - destination: {subset: v2}
    weight: 50
`, want: []string{"spec.http[0].route[1].destination.host: required"}},
		{name: "weights", spec: `
hosts: [reviews]
http:
- route:
  - {destination: {host: a}, weight: 60}
  - {destination: {host: b}, weight: 30}
- route:
  - {destination: {host: a}, weight: -10}
  - {destination: {host: b}, weight: 110}
- route:
  - {destination: {host: a}, weight: 40}
tcp:
- route:
  - {destination: {host: a}}
  - {destination: {host: b}}
`, want: []string{
			"spec.http[0].route: weights must add up to 100, got 90",
			"spec.http[1].route[0].weight: must not be negative, got -10",
			"spec.http[2].route: weights must add up to 100, got 40",
			"spec.tcp[0].route: weights must add up to 100, got 0",
		}},
		{name: "hosts", spec: `
hosts: ["*", "bad_host", "a.*.com", reviews, reviews]
http: [{route: [{destination: {host: reviews}}]}]
`, want: []string{
			`spec.hosts[0]: wildcard host "*" is not allowed for virtual services bound to the mesh gateway`,
			`spec.hosts[1]: "bad_host": label "bad_host" is not a DNS label (letters, digits, '-')`,
			`spec.hosts[2]: "a.*.com": a wildcard is allowed only as the leftmost label ("*.example.com")`,
			`spec.hosts[4]: duplicate host "reviews"`,
		}},
		{name: "no hosts, no routes", spec: `{}`, want: []string{
			"spec.hosts: required (at least one host)",
			"spec: one of http, tcp or tls is required",
		}},
		{name: "http actions", spec: `
hosts: [a]
http:
- match: [{uri: {}}]
- redirect: {uri: /x, redirectCode: 200}
  route: [{destination: {host: a}}]
- directResponse: {status: 700}
- route: [{destination: {host: "*.a.com", port: {number: 70000}}}]
  fault: {}
  mirrorPercentage: {value: 150}
  timeout: 0.0001s
`, want: []string{
			"spec.http[0]: one of route, redirect, directResponse or delegate is required",
			"spec.http[0].match[0].uri: one of exact, prefix or regex is required",
			"spec.http[1]: only one of route, redirect, directResponse or delegate may be set",
			"spec.http[1].redirect.redirectCode: must be 301, 302, 303, 307 or 308, got 200",
			"spec.http[2].directResponse.status: must be between 200 and 599, got 700",
			`spec.http[3].route[0].destination.host: "*.a.com": a destination cannot be a wildcard`,
			"spec.http[3].route[0].destination.port.number: must be between 1 and 65535, got 70000",
			"spec.http[3].timeout: must be at least 1ms, got 100µs",
			"spec.http[3].fault: delay or abort is required",
			"spec.http[3].mirrorPercentage.value: must be between 0 and 100, got 150",
		}},
		{name: "match details", spec: `
hosts: [a]
gateways: [mesh, "Bad/gw"]
http:
- match:
  - uri: {regex: "(unclosed"}
    headers: {X-Upper: {exact: v}}
    sourceLabels: {"app": "bad value!"}
  fault:
    abort: {httpStatus: 100, percentage: {value: 50}}
  route: [{destination: {host: a, subset: "V_1"}}]
`, want: []string{
			`spec.gateways[1]: "Bad/gw": namespace "Bad" is not a namespace name`,
			"spec.http[0].match[0].uri.regex: invalid RE2 regular expression: error parsing regexp: missing closing ): `(unclosed`",
			"spec.http[0].match[0].headers[X-Upper]: header names must be lower case",
			`spec.http[0].match[0].sourceLabels[app]: invalid label value "bad value!": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
			`spec.http[0].route[0].destination.subset: "V_1" is not a valid subset name (DNS-1123 label)`,
			"spec.http[0].fault.abort.httpStatus: must be between 200 and 599, got 100",
		}},
		{name: "tls needs sni", spec: `
hosts: [a.example.com]
gateways: [gw]
tls:
- match: [{port: 443}]
  route: []
`, want: []string{
			"spec.tls[0].match[0].sniHosts: required",
			"spec.tls[0].route: required (at least one destination)",
		}},
		{name: "unknown fields", spec: `
hosts: [a]
http:
- rout: [{destination: {host: a}}]
  match: [{uri: {exact: /}, header: {}}]
tcp: [{route: [{destination: {host: a, prt: {number: 1}}}]}]
`, want: []string{
			"spec.http[0].match[0].header: unknown field",
			"spec.http[0].rout: unknown field",
			"spec.tcp[0].route[0].destination.prt: unknown field",
		}},
		{name: "wrong type", spec: `
hosts: [a]
http: [{route: [{destination: {host: a}, weight: "ten"}]}]
`, want: []string{`spec.http[0].route[0].weight: must be a number, got "ten"`}},
		{name: "null elements", spec: `
hosts: [a, null]
http: [null, {route: [{destination: {host: a}, headers: {request: {set: {x-a: null}}}}]}]
`, want: []string{
			"spec.hosts[1]: must not be null",
			"spec.http[0]: must not be null",
			"spec.http[1].route[0].headers.request.set[x-a]: must not be null",
		}},
		{name: "types", spec: `
hosts: a
http:
- route: [{destination: {host: [a]}}]
  timeout: 5 minutes
  retries: {attempts: 3, perTryTimeout: 2}
  match: {}
  corsPolicy: {allowCredentials: "yes"}
`, want: []string{
			"spec.hosts: must be a list",
			"spec.http[0].corsPolicy.allowCredentials: must be true or false, got a string",
			"spec.http[0].match: must be a list",
			`spec.http[0].retries.perTryTimeout: must be a duration such as "5s" or "250ms", got a number`,
			"spec.http[0].route[0].destination.host: must be a string, got a list",
			`spec.http[0].timeout: invalid duration "5 minutes" (use e.g. "5s" or "250ms")`,
		}},
		{name: "number out of range", spec: `
hosts: [a]
http: [{route: [{destination: {host: a}, weight: 3000000000}]}]
`, want: []string{`spec: invalid value for int32 field weight: 3000000000`}},
		{name: "snake_case names are accepted", spec: `
hosts: [a]
export_to: ["."]
http: [{route: [{destination: {host: a}}], mirror_percentage: {value: 5}}]
`},
		{name: "exportTo", spec: `
hosts: [a]
exportTo: ["*", ".", "Not_A_Namespace", "."]
http: [{route: [{destination: {host: a}}]}]
`, want: []string{
			`spec.exportTo[2]: "Not_A_Namespace" must be ".", "*" or a namespace name`,
			`spec.exportTo[3]: duplicate "."`,
			`spec.exportTo: "*" cannot be combined with other namespaces`,
		}},
	})
}

func TestDestinationRule(t *testing.T) {
	runCases(t, validate.KindDestinationRule, []specCase{
		{name: "valid", spec: `
host: reviews.default.svc.cluster.local
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: 100, connectTimeout: 30ms}
    http: {http1MaxPendingRequests: 10, maxRetries: 3}
  outlierDetection: {consecutive5xxErrors: 7, interval: 5m, baseEjectionTime: 15m, maxEjectionPercent: 50}
  loadBalancer: {simple: ROUND_ROBIN}
  tls: {mode: ISTIO_MUTUAL}
  portLevelSettings:
  - port: {number: 80}
    loadBalancer: {simple: LEAST_REQUEST}
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
`},
		{name: "problems", spec: `
host: ""
trafficPolicy:
  connectionPool: {tcp: {maxConnections: -1}}
  outlierDetection: {maxEjectionPercent: 101, interval: 0s}
  tls: {mode: MUTUAL}
  portLevelSettings:
  - loadBalancer: {simple: RANDOM}
  - port: {number: 80}
    tls: {mode: ISTIO_MUTUAL, privateKey: /k.pem}
  - port: {number: 80}
    connectionPool: {}
subsets:
- name: v1
- name: v1
- labels: {version: v3}
  trafficPolicy: {}
`, want: []string{
			"spec.host: required",
			"spec.trafficPolicy.connectionPool.tcp.maxConnections: must not be negative, got -1",
			"spec.trafficPolicy.outlierDetection.interval: must be at least 1ms, got 0s",
			"spec.trafficPolicy.outlierDetection.maxEjectionPercent: must be between 0 and 100, got 101",
			"spec.trafficPolicy.tls.clientCertificate: required with mode MUTUAL unless credentialName is set",
			"spec.trafficPolicy.tls.privateKey: required with mode MUTUAL unless credentialName is set",
			"spec.trafficPolicy.portLevelSettings[0].port: required",
			"spec.trafficPolicy.portLevelSettings[1].tls.privateKey: must not be set with mode ISTIO_MUTUAL (the mesh's certificates are used)",
			"spec.trafficPolicy.portLevelSettings[2].port.number: duplicate port 80",
			"spec.trafficPolicy.portLevelSettings[2].connectionPool: tcp or http is required",
			`spec.subsets[1].name: duplicate subset "v1"`,
			"spec.subsets[2].name: required",
			"spec.subsets[2].trafficPolicy: must set at least one field",
		}},
		{name: "unknown enum", spec: `
host: a
trafficPolicy: {tls: {mode: SOMETIMES}}
`, want: []string{`spec.trafficPolicy.tls.mode: unknown value "SOMETIMES" (one of DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL)`}},
		{name: "locality distribute", spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: region-1/*
        to: {"region-1/*": 80, "region-2/zone-1": 20}
`},
		{name: "locality problems", spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: "*/zone-1"
        to: {"region-1/*": 60, "region-1/zone-2": 30, "region-2//x": 0}
      - to: {}
      failover:
      - {from: region-1, to: region-1}
  portLevelSettings:
  - port: {number: 80}
    loadBalancer: {localityLbSetting: {distribute: [{from: region-1, to: {region-2: 120}}]}}
`, want: []string{
			"spec.trafficPolicy.loadBalancer.localityLbSetting: distribute and failover cannot both be set",
			`spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].from: "*/zone-1": "*" may only stand for the last part`,
			"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to[region-2//x]: empty part",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to[region-2//x]: weight 0 is not in 1..100",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to: weights sum to 90, want 100",
			`spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to: localities "region-1/*" and "region-1/zone-2" overlap`,
			"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[1].from: required",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[1].to: required (at least one locality and its weight)",
			`spec.trafficPolicy.loadBalancer.localityLbSetting.failover[0]: from and to are the same region "region-1"`,
			"spec.trafficPolicy.portLevelSettings[0].loadBalancer.localityLbSetting.distribute[0].to[region-2]: weight 120 is not in 1..100",
			"spec.trafficPolicy.portLevelSettings[0].loadBalancer.localityLbSetting.distribute[0].to: weights sum to 120, want 100",
		}},
	})
}

func TestServiceEntry(t *testing.T) {
	runCases(t, validate.KindServiceEntry, []specCase{
		{name: "valid DNS", spec: `
hosts: [api.example.com]
ports: [{number: 443, name: https, protocol: TLS}]
location: MESH_EXTERNAL
resolution: DNS
`},
		{name: "valid STATIC", spec: `
hosts: [db.internal]
addresses: [10.1.0.0/16]
ports: [{number: 5432, name: tcp-pg, protocol: TCP, targetPort: 15432}]
resolution: STATIC
endpoints:
- address: 10.1.2.3
  ports: {tcp-pg: 25432}
  labels: {zone: a}
- address: unix:///var/run/pg.sock
`},
		{name: "STATIC needs IP endpoints", spec: `
hosts: [db.internal]
ports: [{number: 5432, name: pg}]
resolution: STATIC
endpoints:
- address: db1.internal
  ports: {pgx: 5432}
- address: ""
`, want: []string{
			`spec.endpoints[0].address: "db1.internal" must be an IP address or unix:// path with resolution STATIC`,
			`spec.endpoints[0].ports[pgx]: no port named "pgx" in spec.ports`,
			"spec.endpoints[1].address: required (unless network is set: the endpoint is reached through that network's gateway)",
		}},
		{name: "STATIC without endpoints", spec: `
hosts: [db.internal]
resolution: STATIC
`, want: []string{"spec.endpoints: required with resolution STATIC (or a workloadSelector)"}},
		{name: "DNS wildcard without endpoints", spec: `
hosts: ["*.example.com"]
ports: [{number: 80, name: http, protocol: HTTP}]
resolution: DNS
`, want: []string{`spec.hosts[0]: wildcard host "*.example.com" cannot be resolved with resolution DNS and no endpoints`}},
		{name: "NONE with endpoints, round robin with several", spec: `
hosts: ["*"]
ports:
- {number: 0, name: a, protocol: SMTP}
- {number: 80, name: a, targetPort: 70000}
- {number: 80}
resolution: NONE
endpoints: [{address: 1.2.3.4}]
addresses: [not-an-ip]
`, want: []string{
			`spec.hosts[0]: wildcard host "*" is not allowed`,
			"spec.addresses[0]: \"not-an-ip\" is not an IP address or CIDR",
			"spec.ports[0].number: must be between 1 and 65535, got 0",
			`spec.ports[0].protocol: unknown protocol "SMTP"`,
			`spec.ports[1].name: duplicate port name "a"`,
			"spec.ports[1].targetPort: must be between 1 and 65535, got 70000",
			"spec.ports[2].number: duplicate port 80",
			"spec.ports[2].name: required",
			"spec.endpoints: must be empty with resolution NONE (traffic goes to the address the client dialled)",
		}},
		{name: "DNS_ROUND_ROBIN and selector", spec: `
hosts: [a.example.com]
resolution: DNS_ROUND_ROBIN
workloadSelector: {labels: {app: a}}
endpoints: [{address: a1.example.com}, {address: a2.example.com}]
`, want: []string{
			"spec.workloadSelector: cannot be combined with endpoints",
			"spec.endpoints: at most one endpoint with resolution DNS_ROUND_ROBIN, got 2",
		}},
	})
}

func TestSidecar(t *testing.T) {
	runCases(t, validate.KindSidecar, []specCase{
		{name: "valid", spec: `
workloadSelector: {labels: {app: reviews}}
ingress:
- port: {number: 9080, protocol: HTTP, name: http}
  defaultEndpoint: 127.0.0.1:8080
egress:
- port: {number: 3306, protocol: MYSQL, name: mysql}
  hosts: ["*/mysql.db.svc.cluster.local"]
- hosts: ["./*", "istio-system/*", "~/*", "prod/*.example.com"]
outboundTrafficPolicy: {mode: REGISTRY_ONLY}
`},
		{name: "egress hosts", spec: `
egress:
- hosts: [reviews, "/a", "Bad_NS/*", "ns/bad_host", "a/b/c"]
`, want: []string{
			`spec.egress[0].hosts[0]: "reviews" must be of the form namespace/dnsName, e.g. "istio-system/*" or "./reviews.default.svc.cluster.local"`,
			`spec.egress[0].hosts[1]: "/a": namespace is empty (use "*" for any namespace)`,
			`spec.egress[0].hosts[2]: "Bad_NS/*": "Bad_NS" is not a namespace name, "*", "." or "~"`,
			`spec.egress[0].hosts[3]: "ns/bad_host": host label "bad_host" is not a DNS label (letters, digits, '-')`,
			`spec.egress[0].hosts[4]: "a/b/c" must be of the form namespace/dnsName, e.g. "istio-system/*" or "./reviews.default.svc.cluster.local"`,
		}},
		{name: "listeners", spec: `
ingress:
- port: {number: 0}
  defaultEndpoint: 10.0.0.1:80
  bind: somewhere
- defaultEndpoint: "unix://"
egress:
- hosts: ["*/*"]
- port: {number: 80}
  hosts: []
- port: {number: 80}
  hosts: ["*/*"]
- hosts: ["*/*"]
`, want: []string{
			"spec.ingress[0].port.number: must be between 1 and 65535, got 0",
			`spec.ingress[0].bind: "somewhere" must be an IP address or unix:// path`,
			`spec.ingress[0].defaultEndpoint: "10.0.0.1:80": host must be 127.0.0.1, 0.0.0.0, ::1 or ::`,
			"spec.ingress[1].port: required",
			"spec.ingress[1].defaultEndpoint: unix domain socket path is empty",
			"spec.egress[0]: the egress listener without port must be the last one",
			`spec.egress[1].hosts: required (at least one "namespace/host")`,
			"spec.egress[2].port.number: duplicate egress port 80",
			"spec.egress[3]: only one egress listener may omit port (egress[0] already does)",
		}},
		{name: "empty", spec: `{}`, want: []string{
			"spec: empty configuration: set egress, ingress, outboundTrafficPolicy or inboundConnectionPool",
		}},
	})
}

// FuzzObject: decoding and validating any object never panics, and an
// object that passes validates again identically after a round trip
// through protojson.
func FuzzObject(f *testing.F) {
	for _, s := range []string{
		`{"spec":{"hosts":["a"],"http":[{"route":[{"destination":{"host":"a"},"weight":100}]}]}}`,
		`{"spec":{"host":"a","subsets":[{"name":"v1"}],"trafficPolicy":{"portLevelSettings":[{}]}}}`,
		`{"spec":{"hosts":["*.a"],"resolution":"DNS","endpoints":[{"address":"x","ports":{"a":1}}]}}`,
		`{"spec":{"egress":[{"hosts":["./*"],"port":{"number":1}}]}}`,
		`{"spec":{"selector":{"matchLabels":{"app":"a"}},"mtls":{"mode":"STRICT"},"portLevelMtls":{"8080":{"mode":"DISABLE"},"0":{}}}}`,
		`{"spec":{"portLevelMtls":{"x":{"mode":3}},"mtls":{"mode":9}}}`,
		`{"spec":{"action":"CUSTOM","provider":{"name":"e"},"rules":[{"from":[{"source":{"principals":["a"],"ipBlocks":["10.0.0.0/8"]}}],` +
			`"to":[{"operation":{"ports":["80"],"paths":["/a/{*}/{**}"]}}],"when":[{"key":"request.headers[x]","values":["v"]}]}]}}`,
		`{"spec":{"action":"DENY","targetRefs":[{"kind":"Service","name":"a"},null],"rules":[{},{"from":[{}],"to":[{"operation":{}}],` +
			`"when":[{"key":"destination.port","notValues":["x"]},{"key":"experimental.envoy.filters.a[b]"}]}]}}`,
		`{"spec":null}`, `[]`, `{"spec":{"http":[null]}}`,
	} {
		for _, k := range []string{"VirtualService", "DestinationRule", "ServiceEntry", "Sidecar", "PeerAuthentication", "AuthorizationPolicy"} {
			f.Add(k, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, kind string, raw []byte) {
		checkRoundTrip(t, kind, raw)
	})
}
