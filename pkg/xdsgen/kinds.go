package xdsgen

// ProxyKind is the kind of proxy that resources are generated for. The
// kinds accept different subsets of xDS, so one Istio object translates
// differently for each; what each can express is declared once, in its
// Capabilities, and the translators read that instead of the kind.
type ProxyKind int

const (
	// ProxyGRPC is a proxyless grpc-go client (v1.85's xDS resolver).
	ProxyGRPC ProxyKind = iota
	// ProxyEnvoy is an Envoy sidecar (upstream Envoy 1.40).
	ProxyEnvoy
	// ProxyRouter is an Envoy gateway (pilot-agent `proxy router`):
	// Envoy's capabilities, for the routes of the VirtualServices bound
	// to its Gateways.
	ProxyRouter
)

// Kinds are the proxy kinds the generators serve mesh configuration to
// (VirtualServices bound to the mesh, DestinationRules, ServiceEntries),
// in the order notes name them. A gateway's clusters are a sidecar's; its
// routes are its Gateways' (GatewayNote).
var Kinds = []ProxyKind{ProxyGRPC, ProxyEnvoy}

func (k ProxyKind) String() string { return k.Can().Name }

// Can returns what the kind can express. An unknown kind is treated as
// proxyless gRPC, the most restricted.
func (k ProxyKind) Can() *Capabilities {
	switch k {
	case ProxyEnvoy:
		return &envoySidecar
	case ProxyRouter:
		return &envoyGateway
	}
	return &proxylessGRPC
}

// Client is the xDS client a proxy kind runs. Where Envoy and grpc-go read
// different fields for one behaviour (a route's timeout, a pool's limits,
// outlier detection, a cluster's defaults), the translators shape the
// resource for the client; every Envoy kind (sidecar, and the gateways to
// come) shares Envoy's shapes.
type Client int

const (
	// ClientGRPC is grpc-go's xDS client.
	ClientGRPC Client = iota
	// ClientEnvoy is Envoy.
	ClientEnvoy
)

// Lack is why a proxy kind cannot do something that xDS or Istio can
// express; the empty Lack means it can. Its text is the reason of the
// note that says what was left out, so it names the client and the cause.
type Lack string

// Can reports whether the kind can (the Lack is empty).
func (l Lack) Can() bool { return l == "" }

// Capabilities declares what one proxy kind does with the parts of Istio's
// configuration that not every kind implements. The facts are those the
// design document records per client (grpc-go v1.85's xDS resolver,
// upstream Envoy 1.40); a test of each translator shows what a Lack
// leaves out.
type Capabilities struct {
	// Name names the kind in notes ("proxyless gRPC", "Envoy").
	Name string
	// Client is the xDS client the kind runs.
	Client Client

	// VirtualService HTTP rules and matches.

	// Redirect, DirectResponse and PathRewrite: a rule whose action the
	// client cannot take is left out whole (its calls would fail or reach
	// another method).
	Redirect, DirectResponse, PathRewrite Lack
	// AuthorityRewrite is dropped where lacking: the call still reaches
	// its destination.
	AuthorityRewrite Lack
	// ClientMatch: a match on the client (sourceLabels, sourceNamespace)
	// needs routes generated per client; a kind whose proxies share
	// their routes cannot evaluate it.
	ClientMatch Lack
	// PseudoHeaderMatch: headers named ":..." among a match's headers.
	PseudoHeaderMatch Lack
	// AuthorityMatch and SchemeMatch: a match's authority and scheme.
	AuthorityMatch, SchemeMatch Lack
	// MethodMatch: where lacking, every call is a POST (gRPC), and a
	// method match is decided when the route is generated.
	MethodMatch Lack
	// MissingHeaderMatch: a withoutHeaders value matcher that also
	// matches a request without the header.
	MissingHeaderMatch Lack
	// QueryMatch: queryParams matches.
	QueryMatch Lack
	// HeaderOps: request and response header changes.
	HeaderOps Lack
	// Mirror: request mirrors; the primary call is unchanged without.
	Mirror Lack
	// CORS: a route's corsPolicy.
	CORS Lack
	// RetryConditions: retry conditions besides gRPC status codes
	// (connect-failure, 5xx, HTTP codes ...).
	RetryConditions Lack
	// PerTryTimeout: a retry's perTryTimeout.
	PerTryTimeout Lack
	// HashKeys: consistent-hash keys besides a header (cookie, source IP,
	// query parameter); where lacking the cluster keeps its balancer.
	HashKeys Lack

	// DestinationRule traffic policy.

	// RandomLB: the RANDOM balancer (ROUND_ROBIN where lacking).
	RandomLB Lack
	// Maglev: the MAGLEV balancer (RING_HASH where lacking).
	Maglev Lack
	// LocalityWeightedLeastRequest: LEAST_REQUEST that honours locality
	// weights (distribute).
	LocalityWeightedLeastRequest Lack
	// OriginateTLS: TLS origination with certificates from files or
	// Secrets (SIMPLE, MUTUAL); where lacking auto mTLS applies.
	OriginateTLS Lack
	// MTLSSNI: the SNI of an ISTIO_MUTUAL cluster.
	MTLSSNI Lack
	// StrictDNS: STRICT_DNS clusters resolving every DNS target (else
	// LOGICAL_DNS, the first target only).
	StrictDNS Lack

	// AuthorizationPolicy.

	// AuditAction: AUDIT policies (RBAC's LOG action).
	AuditAction Lack
	// SNIPrincipal: connection.sni conditions.
	SNIPrincipal Lack
	// RemoteIP: remoteIpBlocks (X-Forwarded-For).
	RemoteIP Lack
	// GRPCHeaderPrincipals: conditions on :scheme and grpc-* headers.
	GRPCHeaderPrincipals Lack
}

var proxylessGRPC = Capabilities{
	Name:   "proxyless gRPC",
	Client: ClientGRPC,

	Redirect:           "grpc-go fails RPCs on a redirect route",
	DirectResponse:     "grpc-go fails RPCs on a direct-response route",
	PathRewrite:        "grpc-go cannot rewrite the path",
	AuthorityRewrite:   "grpc-go cannot rewrite the authority",
	ClientMatch:        "proxyless gRPC clients share their routes, so a match on the client cannot be evaluated",
	PseudoHeaderMatch:  "grpc-go does not match pseudo-headers",
	AuthorityMatch:     "grpc-go does not match the authority",
	SchemeMatch:        "grpc-go does not match the scheme",
	MethodMatch:        "every gRPC call is a POST",
	MissingHeaderMatch: "grpc-go cannot match a missing header by value",
	QueryMatch:         "grpc-go ignores routes with query parameter matches",
	HeaderOps:          "grpc-go does not change headers",
	Mirror:             "grpc-go cannot mirror requests",
	CORS:               "grpc-go does not apply CORS",
	RetryConditions:    "grpc-go retries only on gRPC status codes",
	PerTryTimeout:      "grpc-go ignores per-try timeouts",
	HashKeys:           "grpc-go hashes only on headers",

	RandomLB:                     "grpc-go has no RANDOM balancer",
	Maglev:                       "grpc-go has no Maglev balancer",
	LocalityWeightedLeastRequest: "grpc-go's least_request ignores locality weights",
	OriginateTLS:                 "grpc-go takes TLS only from bootstrap certificate providers",
	MTLSSNI:                      "grpc-go sends it only with GRPC_EXPERIMENTAL_XDS_SNI=true",
	StrictDNS:                    "grpc-go has no STRICT_DNS",

	AuditAction:          "AUDIT is not supported for proxyless gRPC (its RBAC has no LOG action)",
	SNIPrincipal:         "connection.sni is not supported (grpc-go matches the server name as empty)",
	RemoteIP:             "remote IP blocks (X-Forwarded-For) are not supported (grpc-go would match the peer address)",
	GRPCHeaderPrincipals: "grpc-go rejects :scheme and grpc-* matchers",
}

var envoySidecar = Capabilities{
	Name:   "Envoy",
	Client: ClientEnvoy,
}

var envoyGateway = Capabilities{
	Name:        "Envoy gateway",
	Client:      ClientEnvoy,
	ClientMatch: "a gateway's routes do not evaluate sourceLabels or sourceNamespace",
}

// envoy reports whether the kind runs Envoy.
func (c *Capabilities) envoy() bool { return c.Client == ClientEnvoy }
