package xdsnode

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/pkg/model"
)

// Node metadata keys, as Istio's proxies and meshfed's agents set them.
const (
	// MetadataClusterID is the proxy's cluster ID (a string).
	MetadataClusterID = "CLUSTER_ID"
	// MetadataNamespace is the proxy's namespace (a string).
	MetadataNamespace = "NAMESPACE"
	// MetadataNetwork is the proxy's network, when meshes span networks (a
	// string).
	MetadataNetwork = "NETWORK"
	// MetadataLabels are the labels of the proxy's Pod (a struct of strings).
	MetadataLabels = "LABELS"
	// MetadataGenerator names the kind of resources the proxy wants, e.g.
	// GeneratorGRPC (a string).
	MetadataGenerator = "GENERATOR"
	// MetadataInterceptionMode is how an Envoy sidecar captures traffic:
	// InterceptionRedirect, InterceptionTProxy or InterceptionNone (a
	// string).
	MetadataInterceptionMode = "INTERCEPTION_MODE"
	// MetadataIstioVersion is an Istio proxy's version (a string).
	MetadataIstioVersion = "ISTIO_VERSION"
	// MetadataInstanceIPs are the proxy's IP addresses, comma-separated (a
	// string).
	MetadataInstanceIPs = "INSTANCE_IPS"
	// MetadataServiceAccount is the service account of the proxy's Pod (a
	// string).
	MetadataServiceAccount = "SERVICE_ACCOUNT"
)

// MetadataEnvPrefix prefixes the environment variable from which Istio's
// agents (pilot-agent, meshfed-agent) take a metadata key's value, e.g.
// ISTIO_META_CLUSTER_ID; see MetadataEnv.
const MetadataEnvPrefix = "ISTIO_META_"

// MetadataEnv returns the environment variable that carries metadata key
// into a proxy's node, e.g. MetadataEnv(MetadataClusterID) is
// "ISTIO_META_CLUSTER_ID".
func MetadataEnv(key string) string { return MetadataEnvPrefix + key }

// Values of MetadataGenerator.
const (
	// GeneratorGRPC is a proxyless gRPC node.
	GeneratorGRPC = "grpc"
	// GeneratorEvent is istioctl's event stream; proxy status leaves such
	// streams out.
	GeneratorEvent = "event"
)

// Values of MetadataInterceptionMode, as Istio spells them.
const (
	InterceptionRedirect = "REDIRECT"
	InterceptionTProxy   = "TPROXY"
	InterceptionNone     = "NONE"
)

// Metadata is the node metadata meshfed reads and writes. An empty field
// is left out of the node's metadata.
type Metadata struct {
	ClusterID        model.ClusterID
	Namespace        string
	Network          string
	Labels           map[string]string
	Generator        string
	InterceptionMode string
	IstioVersion     string
	InstanceIPs      string
	ServiceAccount   string
}

// strings returns the string-valued fields by key, empty ones included.
func (m Metadata) strings() map[string]string {
	return map[string]string{
		MetadataClusterID:        string(m.ClusterID),
		MetadataNamespace:        m.Namespace,
		MetadataNetwork:          m.Network,
		MetadataGenerator:        m.Generator,
		MetadataInterceptionMode: m.InterceptionMode,
		MetadataIstioVersion:     m.IstioVersion,
		MetadataInstanceIPs:      m.InstanceIPs,
		MetadataServiceAccount:   m.ServiceAccount,
	}
}

// Map returns the metadata as JSON values by key (what a bootstrap's
// node.metadata holds), without the empty fields.
func (m Metadata) Map() map[string]any {
	out := map[string]any{}
	for k, v := range m.strings() {
		if v != "" {
			out[k] = v
		}
	}
	if len(m.Labels) > 0 {
		labels := make(map[string]any, len(m.Labels))
		for k, v := range m.Labels {
			labels[k] = v
		}
		out[MetadataLabels] = labels
	}
	return out
}

// Struct returns the metadata as a node's metadata Struct, without the
// empty fields.
func (m Metadata) Struct() *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range m.strings() {
		if v != "" {
			s.Fields[k] = structpb.NewStringValue(v)
		}
	}
	if len(m.Labels) > 0 {
		labels := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m.Labels))}
		for k, v := range m.Labels {
			labels.Fields[k] = structpb.NewStringValue(v)
		}
		s.Fields[MetadataLabels] = structpb.NewStructValue(labels)
	}
	return s
}

// MetadataOf reads the metadata meshfed knows from a node's metadata
// Struct (nil is empty metadata). A key of another kind than this package
// documents reads as empty; so does a label that is not a string.
func MetadataOf(s *structpb.Struct) Metadata {
	f := s.GetFields()
	str := func(k string) string { return f[k].GetStringValue() }
	m := Metadata{
		ClusterID:        model.ClusterID(str(MetadataClusterID)),
		Namespace:        str(MetadataNamespace),
		Network:          str(MetadataNetwork),
		Generator:        str(MetadataGenerator),
		InterceptionMode: str(MetadataInterceptionMode),
		IstioVersion:     str(MetadataIstioVersion),
		InstanceIPs:      str(MetadataInstanceIPs),
		ServiceAccount:   str(MetadataServiceAccount),
	}
	for k, v := range f[MetadataLabels].GetStructValue().GetFields() {
		if sv, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[k] = sv.StringValue
		}
	}
	return m
}

// ClusterOf returns a node metadata's CLUSTER_ID, "" without one.
func ClusterOf(s *structpb.Struct) model.ClusterID {
	return model.ClusterID(s.GetFields()[MetadataClusterID].GetStringValue())
}
