package podagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshfed/meshfed/pkg/agent"
)

// Names in the bootstrap that the hub relies on.
const (
	// LocalityLabel is the Pod label of its locality, "region.zone.subzone"
	// (zone and subzone optional), as Istio names it.
	LocalityLabel = "istio-locality"
	// CertProviderInstance is the certificate provider instance of the
	// bootstrap, the one the hub's secure resources name.
	CertProviderInstance = "default"
	// InboundListenerTemplate is the bootstrap's
	// server_listener_resource_name_template: an xDS-enabled gRPC server
	// asks for its listener on <ip>:<port> under this name.
	InboundListenerTemplate = "xds.istio.io/grpc/lds/inbound/%s"
	// Generator is the node's GENERATOR metadata, proxyless gRPC.
	Generator = "grpc"
)

// bootstrapJSON is grpc-go's xDS bootstrap, the fields meshfed writes.
type bootstrapJSON struct {
	XDSServers                         []xdsServer             `json:"xds_servers"`
	Node                               node                    `json:"node"`
	CertificateProviders               map[string]certProvider `json:"certificate_providers"`
	ServerListenerResourceNameTemplate string                  `json:"server_listener_resource_name_template"`
}

type xdsServer struct {
	ServerURI      string         `json:"server_uri"`
	ChannelCreds   []channelCreds `json:"channel_creds"`
	ServerFeatures []string       `json:"server_features"`
}

type channelCreds struct {
	Type string `json:"type"`
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

// Bootstrap returns grpc-go's xDS bootstrap (indented JSON) for the Pod
// that opts describe, with its labels: the xDS server DiscoveryAddress
// (plaintext), the node (ID, metadata, and locality from the istio-locality
// label), a file_watcher certificate provider reading the agent's files in
// CertDir, and Istio's inbound listener name template. Only the fields it
// uses are checked (not the CA's); defaults apply as in Run.
func Bootstrap(opts Options, labels map[string]string) ([]byte, error) {
	opts = opts.withDefaults()
	if err := invalid(opts.validateBootstrap()); err != nil {
		return nil, err
	}
	refresh, err := protojson.Marshal(durationpb.New(opts.CertRefreshInterval))
	if err != nil {
		return nil, fmt.Errorf("podagent: CertRefreshInterval: %w", err)
	}
	md := map[string]any{
		"CLUSTER_ID":      opts.ClusterID,
		"NAMESPACE":       opts.PodNamespace,
		"GENERATOR":       Generator,
		"INSTANCE_IPS":    opts.InstanceIP,
		"SERVICE_ACCOUNT": opts.ServiceAccount,
	}
	if opts.Network != "" {
		md["NETWORK"] = opts.Network
	}
	if len(labels) > 0 {
		md["LABELS"] = labels
	}
	b := bootstrapJSON{
		XDSServers: []xdsServer{{
			ServerURI:      opts.DiscoveryAddress,
			ChannelCreds:   []channelCreds{{Type: "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node: node{
			ID:       NodeID(opts.InstanceIP, opts.PodName, opts.PodNamespace, opts.DomainSuffix),
			Metadata: md,
			Locality: localityOf(labels),
		},
		CertificateProviders: map[string]certProvider{CertProviderInstance: {
			PluginName: "file_watcher",
			Config: fileWatcherConfig{
				CertificateFile:   filepath.Join(opts.CertDir, agent.CertChainFile),
				PrivateKeyFile:    filepath.Join(opts.CertDir, agent.KeyFile),
				CACertificateFile: filepath.Join(opts.CertDir, agent.RootCertFile),
				RefreshInterval:   refresh,
			},
		}},
		ServerListenerResourceNameTemplate: InboundListenerTemplate,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("podagent: bootstrap: %w", err)
	}
	return buf.Bytes(), nil
}

// NodeID is the xDS node ID of a Pod, as Istio's proxies form it:
// sidecar~<ip>~<pod>.<namespace>~<namespace>.svc.<domainSuffix>.
func NodeID(ip, pod, namespace, domainSuffix string) string {
	return "sidecar~" + ip + "~" + pod + "." + namespace + "~" + namespace + ".svc." + domainSuffix
}

// localityOf parses the istio-locality label, "region.zone.subzone" with
// zone and subzone optional (a subzone may hold dots); nil without one.
func localityOf(labels map[string]string) *locality {
	v := strings.TrimSpace(labels[LocalityLabel])
	if v == "" {
		return nil
	}
	parts := strings.SplitN(v, ".", 3)
	parts = append(parts, "", "")
	l := &locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
	if *l == (locality{}) {
		return nil
	}
	return l
}

// ParseLabels parses the downward API file of a Pod's labels: one
// key="value" a line, the value quoted as Go quotes strings (so that any
// byte may appear in it). Blank lines are skipped; any other line that is
// not of that form, or repeats a key, is an error naming its line number.
func ParseLabels(data []byte) (map[string]string, error) {
	labels := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, quoted, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("podagent: labels line %d: no '='", i+1)
		}
		if key == "" || strings.ContainsAny(key, " \t\"") {
			return nil, fmt.Errorf("podagent: labels line %d: bad key %q", i+1, key)
		}
		if !strings.HasPrefix(quoted, `"`) {
			return nil, fmt.Errorf("podagent: labels line %d: value of %q is not a double-quoted string", i+1, key)
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("podagent: labels line %d: value of %q: %w", i+1, key, err)
		}
		if _, dup := labels[key]; dup {
			return nil, fmt.Errorf("podagent: labels line %d: key %q repeated", i+1, key)
		}
		labels[key] = value
	}
	return labels, nil
}

// readLabels reads and parses a labels file; no file (or no path) means no
// labels.
func readLabels(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("podagent: labels: %w", err)
	}
	labels, err := ParseLabels(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return labels, nil
}

// writeFileAtomic makes path hold data, mode 0644, in one rename: readers
// see the old file or the new one, never a part. It creates the directory.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, werr := f.Write(data)
	cherr := f.Chmod(0o644)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, cherr, serr, cerr); err != nil {
		return fmt.Errorf("podagent: writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	return nil
}
