package podagent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/xds"

	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/spoke/podagent"
)

// podOptions describes the Pod of the golden bootstrap.
func podOptions() podagent.Options {
	o := podagent.DefaultOptions()
	o.CAAddress = "meshfed-hub.meshfed-system.svc:15012"
	o.CertDir = "/var/lib/istio/data"
	o.BootstrapPath = "/etc/istio/proxy/grpc-bootstrap.json"
	o.PodName = "client-7d9f-abcde"
	o.PodNamespace = "demo"
	o.InstanceIP = "10.11.0.200"
	o.ServiceAccount = "client"
	o.ClusterID = "cluster-1"
	o.Network = "network-1"
	return o
}

func podLabels() map[string]string {
	return map[string]string{
		"app":                             "client",
		"version":                         "v1",
		"istio-locality":                  "us-east1.us-east1-b.rack-7",
		"security.istio.io/tlsMode":       "istio",
		"example.com/quote-and-amp":       `a"b&c<d>`,
		"service.istio.io/canonical-name": "client",
	}
}

func TestBootstrapGolden(t *testing.T) {
	got, err := podagent.Bootstrap(podOptions(), podLabels())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "bootstrap.golden.json"), got)
}

// TestBootstrapShape checks what the hub and grpc-go read, independently of
// the golden file's formatting.
func TestBootstrapShape(t *testing.T) {
	opts := podOptions()
	opts.CertRefreshInterval = 90 * time.Second
	full := decode(t, mustBootstrap(t, opts, podLabels()))
	node := full["node"].(map[string]any)
	if got, want := node["id"], "sidecar~10.11.0.200~client-7d9f-abcde.demo~demo.svc.cluster.local"; got != want {
		t.Errorf("node id %q, want %q", got, want)
	}
	md := node["metadata"].(map[string]any)
	for k, want := range map[string]string{
		"CLUSTER_ID": "cluster-1", "NAMESPACE": "demo", "NETWORK": "network-1", "GENERATOR": "grpc",
		"INSTANCE_IPS": "10.11.0.200", "SERVICE_ACCOUNT": "client",
	} {
		if md[k] != want {
			t.Errorf("metadata %s = %v, want %q", k, md[k], want)
		}
	}
	if l := md["LABELS"].(map[string]any); l["app"] != "client" || len(l) != len(podLabels()) {
		t.Errorf("metadata LABELS = %v", l)
	}
	loc := node["locality"].(map[string]any)
	if loc["region"] != "us-east1" || loc["zone"] != "us-east1-b" || loc["sub_zone"] != "rack-7" {
		t.Errorf("locality %v", loc)
	}
	cfg := full["certificate_providers"].(map[string]any)["default"].(map[string]any)["config"].(map[string]any)
	if cfg["refresh_interval"] != "90s" || cfg["certificate_file"] != "/var/lib/istio/data/cert-chain.pem" {
		t.Errorf("file_watcher config %v", cfg)
	}
	// xDS over mutual TLS to the CA's address (the hub's 15012) by
	// default, with the same files; plaintext only when asked.
	server := full["xds_servers"].([]any)[0].(map[string]any)
	creds := server["channel_creds"].([]any)[0].(map[string]any)
	if server["server_uri"] != "meshfed-hub.meshfed-system.svc:15012" || creds["type"] != "tls" ||
		creds["config"].(map[string]any)["private_key_file"] != "/var/lib/istio/data/key.pem" {
		t.Errorf("xDS server %v", server)
	}
	plain := opts
	plain.DiscoveryAddress, plain.XDSPlaintext = "meshfed-hub.meshfed-system.svc:15010", true
	server = decode(t, mustBootstrap(t, plain, nil))["xds_servers"].([]any)[0].(map[string]any)
	if creds := server["channel_creds"].([]any)[0].(map[string]any); server["server_uri"] != plain.DiscoveryAddress || creds["type"] != "insecure" {
		t.Errorf("plaintext xDS server %v", server)
	}

	// No network, no labels: NETWORK, LABELS and the locality are left out.
	opts.Network = ""
	bare := decode(t, mustBootstrap(t, opts, nil))
	node = bare["node"].(map[string]any)
	md = node["metadata"].(map[string]any)
	for _, k := range []string{"NETWORK", "LABELS"} {
		if _, ok := md[k]; ok {
			t.Errorf("metadata %s = %v, want it left out", k, md[k])
		}
	}
	if _, ok := node["locality"]; ok {
		t.Errorf("locality %v without the istio-locality label", node["locality"])
	}
	accepted(t, mustBootstrap(t, opts, nil))
}

func TestBootstrapInvalidOptions(t *testing.T) {
	opts := podOptions()
	opts.InstanceIP = "not-an-ip"
	opts.PodName = ""
	_, err := podagent.Bootstrap(opts, nil)
	if !errors.Is(err, podagent.ErrInvalidOptions) {
		t.Fatalf("error %v, want ErrInvalidOptions", err)
	}
	for _, field := range []string{"InstanceIP", "PodName"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

// TestBootstrapAcceptedByGRPC builds grpc-go's xDS resolver from the
// bootstrap, which parses and checks it (the file_watcher configuration
// included) as an application's grpc-go would.
func TestBootstrapAcceptedByGRPC(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "bootstrap.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	accepted(t, golden)
	opts := podOptions()
	opts.CertRefreshInterval = 1500 * time.Millisecond
	accepted(t, mustBootstrap(t, opts, podLabels()))
}

// TestBrokenBootstrapRefusedByGRPC is the sanity check of the test above:
// grpc-go does refuse a bootstrap it cannot use.
func TestBrokenBootstrapRefusedByGRPC(t *testing.T) {
	good := mustBootstrap(t, podOptions(), podLabels())
	for name, broken := range map[string][]byte{
		"bad refresh_interval": bytes.Replace(good, []byte(`"refresh_interval": "10s"`), []byte(`"refresh_interval": "1m0s"`), 1),
		"no xds_servers":       bytes.Replace(good, []byte(`"xds_servers"`), []byte(`"xds_servers_not"`), 1),
		"not JSON":             good[:len(good)/2],
	} {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(broken, good) {
				t.Fatal("the bootstrap was not broken: the replacement did not match")
			}
			if err := buildResolver(t, broken); err == nil {
				t.Errorf("grpc-go accepted a broken bootstrap:\n%s", broken)
			} else {
				msg, _, _ := strings.Cut(err.Error(), "\n")
				t.Logf("refused as expected: %s", msg)
			}
		})
	}
}

func mustBootstrap(t *testing.T, opts podagent.Options, labels map[string]string) []byte {
	t.Helper()
	b, err := podagent.Bootstrap(opts, labels)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func accepted(t *testing.T, bootstrap []byte) {
	t.Helper()
	if err := buildResolver(t, withCertFiles(t, bootstrap)); err != nil {
		t.Errorf("grpc-go refused the bootstrap: %v\n%s", err, bootstrap)
	}
}

// withCertFiles moves the bootstrap's certificate files (of the golden
// Pod's CertDir) into a directory of real ones: grpc-go's TLS channel
// credentials wait for their files before the xDS client can close.
func withCertFiles(t *testing.T, bootstrap []byte) []byte {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("test roots", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(pki.IssueOptions{URIs: []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/demo/sa/client"}},
		Validity: time.Hour, Client: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{agent.CertChainFile: cert, agent.KeyFile: key, agent.RootCertFile: ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return bytes.ReplaceAll(bootstrap, []byte(podOptions().CertDir), []byte(dir))
}

// buildResolver builds (and closes) an xds:/// resolver from bootstrap.
func buildResolver(t *testing.T, bootstrap []byte) error {
	t.Helper()
	b, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return err
	}
	// The bootstrap is parsed when a resolver is built, as when a channel
	// to an xds:/// target first connects.
	r, err := b.Build(resolver.Target{URL: url.URL{Scheme: "xds", Path: "/echo.demo.svc.cluster.local:7070"}}, &clientConn{}, resolver.BuildOptions{})
	if err != nil {
		return err
	}
	r.Close()
	return nil
}

// clientConn stands for the channel a resolver reports to; it keeps what it
// is told.
type clientConn struct {
	mu     sync.Mutex
	states []resolver.State
	errs   []error
}

func (c *clientConn) UpdateState(s resolver.State) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.states = append(c.states, s)
	return nil
}

func (c *clientConn) ReportError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *clientConn) NewAddress([]resolver.Address) {}

func (c *clientConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}
