package xdsnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/model"
)

// Names in the bootstrap that the hub's resources rely on.
const (
	// CertProviderInstance is the certificate provider instance a bootstrap
	// declares and the hub's secure resources name.
	CertProviderInstance = "default"
	// InboundListenerPrefix is the prefix of server-side listener names,
	// Istio's.
	InboundListenerPrefix = "xds.istio.io/grpc/lds/inbound/"
	// InboundListenerTemplate is the bootstrap's
	// server_listener_resource_name_template, Istio's: an xDS-enabled gRPC
	// server asks for its listener on "<ip>:<port>" under this name.
	InboundListenerTemplate = InboundListenerPrefix + "%s"
	// DefaultCertRefreshInterval is the file_watcher refresh interval when
	// Bootstrap.CertRefreshInterval is unset: istio-agent's default.
	DefaultCertRefreshInterval = 10 * time.Second
)

// ErrInvalidBootstrap is returned by Bootstrap.JSON for a bootstrap that
// lacks a required field.
var ErrInvalidBootstrap = errors.New("xdsnode: invalid bootstrap")

// Bootstrap describes grpc-go's xDS bootstrap for one workload.
type Bootstrap struct {
	// ServerURI is the host:port of the hub's xDS server. Required.
	ServerURI string
	// ServerTLS dials ServerURI over mutual TLS (grpc-go's "tls" channel
	// credentials): the hub is verified against the roots in CertDir for
	// the host of ServerURI, and the workload's certificate there is
	// presented, both re-read every CertRefreshInterval; the hub's
	// authenticated port (15012) holds the certificate's identity against
	// the node. Needs CertDir. Without it the channel is plaintext (the
	// hub's unauthenticated port).
	ServerTLS bool
	// NodeID is the node's ID, e.g. SidecarID(...). Required.
	NodeID string
	// Metadata is the node's metadata.
	Metadata Metadata
	// Locality is the node's locality; empty parts are left out, and so is
	// an empty locality.
	Locality model.Locality
	// CertDir, when set, adds the file_watcher certificate provider
	// CertProviderInstance reading an agent's files (pkg/agent's file
	// names) in CertDir.
	CertDir string
	// CertRefreshInterval is how often that provider re-reads the files;
	// default DefaultCertRefreshInterval.
	CertRefreshInterval time.Duration
}

// bootstrapJSON is grpc-go's xDS bootstrap, the fields meshfed writes.
type bootstrapJSON struct {
	XDSServers                         []xdsServer             `json:"xds_servers"`
	Node                               node                    `json:"node"`
	CertificateProviders               map[string]certProvider `json:"certificate_providers,omitempty"`
	ServerListenerResourceNameTemplate string                  `json:"server_listener_resource_name_template"`
}

type xdsServer struct {
	ServerURI      string         `json:"server_uri"`
	ChannelCreds   []channelCreds `json:"channel_creds"`
	ServerFeatures []string       `json:"server_features"`
}

type channelCreds struct {
	Type   string          `json:"type"`
	Config *tlsCredsConfig `json:"config,omitempty"`
}

// tlsCredsConfig is grpc-go's "tls" channel credentials' config.
type tlsCredsConfig struct {
	CACertificateFile string          `json:"ca_certificate_file"`
	CertificateFile   string          `json:"certificate_file"`
	PrivateKeyFile    string          `json:"private_key_file"`
	RefreshInterval   json.RawMessage `json:"refresh_interval"`
}

type node struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata"`
	Locality *locality      `json:"locality,omitempty"`
}

// locality is a node's locality; empty parts are left out.
type locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

type certProvider struct {
	PluginName string            `json:"plugin_name"`
	Config     fileWatcherConfig `json:"config"`
}

type fileWatcherConfig struct {
	CertificateFile   string          `json:"certificate_file"`
	PrivateKeyFile    string          `json:"private_key_file"`
	CACertificateFile string          `json:"ca_certificate_file"`
	RefreshInterval   json.RawMessage `json:"refresh_interval"`
}

// JSON returns the bootstrap as indented JSON (HTML characters not
// escaped), what GRPC_XDS_BOOTSTRAP names or
// xds.NewXDSResolverWithConfigForTesting takes. It fails with
// ErrInvalidBootstrap without ServerURI or NodeID or with a negative
// refresh interval.
func (b Bootstrap) JSON() ([]byte, error) {
	if b.ServerURI == "" || b.NodeID == "" {
		return nil, fmt.Errorf("%w: ServerURI and NodeID are required", ErrInvalidBootstrap)
	}
	if b.ServerTLS && b.CertDir == "" {
		return nil, fmt.Errorf("%w: ServerTLS needs CertDir (the certificate files)", ErrInvalidBootstrap)
	}
	out := bootstrapJSON{
		XDSServers: []xdsServer{{
			ServerURI:      b.ServerURI,
			ChannelCreds:   []channelCreds{{Type: "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node:                               node{ID: b.NodeID, Metadata: b.Metadata.Map()},
		ServerListenerResourceNameTemplate: InboundListenerTemplate,
	}
	if b.Locality != (model.Locality{}) {
		out.Node.Locality = &locality{Region: b.Locality.Region, Zone: b.Locality.Zone, SubZone: b.Locality.SubZone}
	}
	if b.CertDir != "" {
		every := b.CertRefreshInterval
		if every == 0 {
			every = DefaultCertRefreshInterval
		}
		if every < 0 {
			return nil, fmt.Errorf("%w: CertRefreshInterval %v is negative", ErrInvalidBootstrap, every)
		}
		refresh, err := protojson.Marshal(durationpb.New(every))
		if err != nil {
			return nil, fmt.Errorf("xdsnode: CertRefreshInterval: %w", err)
		}
		chain, key, roots := filepath.Join(b.CertDir, agent.CertChainFile), filepath.Join(b.CertDir, agent.KeyFile), filepath.Join(b.CertDir, agent.RootCertFile)
		out.CertificateProviders = map[string]certProvider{CertProviderInstance: {
			PluginName: "file_watcher",
			Config:     fileWatcherConfig{CertificateFile: chain, PrivateKeyFile: key, CACertificateFile: roots, RefreshInterval: refresh},
		}}
		if b.ServerTLS {
			out.XDSServers[0].ChannelCreds = []channelCreds{{Type: "tls", Config: &tlsCredsConfig{
				CACertificateFile: roots, CertificateFile: chain, PrivateKeyFile: key, RefreshInterval: refresh,
			}}}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("xdsnode: bootstrap: %w", err)
	}
	return buf.Bytes(), nil
}

// BootstrapNode is what a bootstrap says of its node and certificates, as
// ParseBootstrap reads it.
type BootstrapNode struct {
	// NodeID is node.id.
	NodeID string
	// Metadata is node.metadata, as MetadataOf reads it.
	Metadata Metadata
	// CertProviders names the certificate provider instances declared.
	CertProviders []string
}

// ParseBootstrap reads the node and the certificate providers of a
// bootstrap written elsewhere (by meshfed-agent, say). It checks only that
// data is a JSON object of that shape.
func ParseBootstrap(data []byte) (BootstrapNode, error) {
	var b struct {
		Node struct {
			ID       string          `json:"id"`
			Metadata json.RawMessage `json:"metadata"`
		} `json:"node"`
		CertificateProviders map[string]json.RawMessage `json:"certificate_providers"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return BootstrapNode{}, fmt.Errorf("xdsnode: bootstrap: %w", err)
	}
	out := BootstrapNode{NodeID: b.Node.ID}
	if len(b.Node.Metadata) > 0 && string(b.Node.Metadata) != "null" {
		md := &structpb.Struct{}
		if err := protojson.Unmarshal(b.Node.Metadata, md); err != nil {
			return BootstrapNode{}, fmt.Errorf("xdsnode: bootstrap node metadata: %w", err)
		}
		out.Metadata = MetadataOf(md)
	}
	for name := range b.CertificateProviders {
		out.CertProviders = append(out.CertProviders, name)
	}
	slices.Sort(out.CertProviders)
	return out, nil
}
