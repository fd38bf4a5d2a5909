package xdsgen

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// SDS names that pilot-agent serves to its Envoy (istio.io/istio
// pkg/model/authentication.go and tools/packaging/common/envoy_bootstrap.json).
const (
	// SDSClusterName is the static cluster of pilot-agent's Envoy bootstrap
	// that reaches pilot-agent's SDS server over a Unix socket
	// (./var/run/secrets/workload-spiffe-uds/socket), speaking gRPC (HTTP/2).
	SDSClusterName = "sds-grpc"
	// SDSDefaultSecret is the workload's certificate and key.
	SDSDefaultSecret = "default"
	// SDSRootSecret is the validation context with the mesh's roots.
	SDSRootSecret = "ROOTCA"
)

// ALPN values of Istio's sidecars (istio.io/istio pkg/model/proxy.go).
// Upstream Envoy has no metadata-exchange filter, so the
// "istio-peer-exchange" protocol that istiod adds for Istio's own Envoy
// build is left out, as istiod does when metadata exchange is off.
var (
	// alpnInMesh: a sidecar talking to a sidecar.
	alpnInMesh = []string{"istio"}
	// alpnInMeshH2: the same, for an HTTP/2 (or gRPC) cluster.
	alpnInMeshH2 = []string{"istio", "h2"}
	// alpnDownstream: what an inbound listener offers. A client offering
	// only "istio" negotiates no protocol, and the inbound
	// HttpConnectionManager (codec AUTO) detects HTTP/1.1 itself.
	alpnDownstream = []string{"h2", "http/1.1"}
)

// sdsSecret references secret name on pilot-agent's SDS server, exactly as
// istiod writes it: gRPC to the bootstrap cluster SDSClusterName, node sent
// on the first message only, and no initial fetch timeout (a listener or
// cluster waits for its certificate instead of starting without it).
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SDSClusterName}},
				}},
			}},
			ResourceApiVersion:  corev3.ApiVersion_V3,
			InitialFetchTimeout: durationpb.New(0),
		},
	}
}

// sidecarCommonTLS presents the workload certificate and validates the peer
// against the roots (and sans, when there are any), both from SDS.
func sidecarCommonTLS(alpn []string, sans []string) *tlsv3.CommonTlsContext {
	// sanMatcher types a SPIFFE ID as a URI, a DestinationRule's other
	// SANs by their form.
	vc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(sans)}
	return &tlsv3.CommonTlsContext{
		AlpnProtocols:                  slices.Clone(alpn),
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(SDSDefaultSecret)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         vc,
				ValidationContextSdsSecretConfig: sdsSecret(SDSRootSecret),
			},
		},
	}
}

// sidecarUpstreamTLS is the client side of Istio mutual TLS towards a
// service (the "tlsMode-istio" socket of sidecarAutoMTLS): SNI sni, ALPN "istio" (plus "h2" for HTTP/2 clusters), and only
// servers whose certificate has one of sans (any certificate chaining to
// the roots when sans is empty, as for proxyless clients).
func sidecarUpstreamTLS(sni string, sans []string, h2 bool) *corev3.TransportSocket {
	alpn := alpnInMesh
	if h2 {
		alpn = alpnInMeshH2
	}
	ctx := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: sidecarCommonTLS(alpn, sans),
		Sni:              sni,
	}
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// Names of the transport socket matches of an auto-mTLS cluster, and of
// the plaintext transport socket (istiod's names).
const (
	transportSocketMatchIstio    = "tlsMode-istio"
	transportSocketMatchDisabled = "tlsMode-disabled"
	transportSocketRawBuffer     = "envoy.transport_sockets.raw_buffer"
)

// sidecarAutoMTLS are the transport socket matches of a cluster with auto
// mutual TLS: Envoy takes, per endpoint, the first whose match is a subset
// of the endpoint's filter_metadata[TransportSocketMatchKey]. Endpoints
// with {tlsMode: "istio"} (LoadAssignments gives it to injected Pods) get
// sidecarUpstreamTLS(sni, sans, h2); the empty match takes every other
// endpoint, in plaintext.
func sidecarAutoMTLS(sni string, sans []string, h2 bool) []*clusterv3.Cluster_TransportSocketMatch {
	return []*clusterv3.Cluster_TransportSocketMatch{
		{
			Name:            transportSocketMatchIstio,
			Match:           tlsModeIstioStruct(),
			TransportSocket: sidecarUpstreamTLS(sni, sans, h2),
		},
		{
			Name:  transportSocketMatchDisabled,
			Match: &structpb.Struct{},
			TransportSocket: &corev3.TransportSocket{
				Name:       transportSocketRawBuffer,
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&rawbufferv3.RawBuffer{})},
			},
		},
	}
}

// sidecarDownstreamTLS is the server side: a client certificate chaining to
// the roots is required (any SPIFFE ID of the mesh; authorization would
// narrow it).
func sidecarDownstreamTLS() *corev3.TransportSocket {
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext:         sidecarCommonTLS(alpnDownstream, nil),
		RequireClientCertificate: wrapperspb.Bool(true),
	}
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}
