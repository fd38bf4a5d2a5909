package xdsnode

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

func TestBootstrapGolden(t *testing.T) {
	for name, b := range map[string]Bootstrap{
		"client": {
			ServerURI: "127.0.0.1:15010",
			NodeID:    SidecarID("127.0.0.1", "client", "default", model.DefaultDomainSuffix),
			Metadata:  Metadata{ClusterID: "c1", Namespace: "default"},
		},
		"secure": {
			ServerURI: "meshfed-hub.meshfed-system.svc:15012",
			ServerTLS: true,
			NodeID:    SidecarID("10.11.0.200", "client-7d9f-abcde", "demo", "cluster.local"),
			Metadata: Metadata{
				ClusterID: "cluster-1", Namespace: "demo", Network: "network-1", Generator: GeneratorGRPC,
				InstanceIPs: "10.11.0.200", ServiceAccount: "client",
				Labels: map[string]string{"app": "client", "quote": `a"b&c<d>`},
			},
			Locality:            model.Locality{Region: "us-east1", Zone: "us-east1-b"},
			CertDir:             "/var/lib/istio/data",
			CertRefreshInterval: 1500 * time.Millisecond,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := b.JSON()
			if err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, "testdata/bootstrap-"+name+".golden.json", got)

			parsed, err := ParseBootstrap(got)
			if err != nil {
				t.Fatal(err)
			}
			wantProviders := []string(nil)
			if b.CertDir != "" {
				wantProviders = []string{CertProviderInstance}
			}
			want := BootstrapNode{NodeID: b.NodeID, Metadata: b.Metadata, CertProviders: wantProviders}
			if !reflect.DeepEqual(parsed, want) {
				t.Errorf("ParseBootstrap = %+v, want %+v", parsed, want)
			}
		})
	}
}

func TestBootstrapDefaults(t *testing.T) {
	raw, err := Bootstrap{ServerURI: "h:1", NodeID: "n", CertDir: "/d"}.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Node                 map[string]json.RawMessage `json:"node"`
		CertificateProviders map[string]struct {
			Config struct {
				RefreshInterval string `json:"refresh_interval"`
			} `json:"config"`
		} `json:"certificate_providers"`
		Template string `json:"server_listener_resource_name_template"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if got := b.CertificateProviders[CertProviderInstance].Config.RefreshInterval; got != "10s" {
		t.Errorf("refresh_interval %q, want 10s", got)
	}
	if _, ok := b.Node["locality"]; ok {
		t.Errorf("empty locality written: %s", raw)
	}
	if b.Template != "xds.istio.io/grpc/lds/inbound/%s" {
		t.Errorf("listener template %q", b.Template)
	}
}

func TestBootstrapInvalid(t *testing.T) {
	for name, b := range map[string]Bootstrap{
		"no server":         {NodeID: "n"},
		"no node ID":        {ServerURI: "h:1"},
		"negative refresh":  {ServerURI: "h:1", NodeID: "n", CertDir: "/d", CertRefreshInterval: -time.Second},
		"TLS without certs": {ServerURI: "h:1", NodeID: "n", ServerTLS: true},
	} {
		if _, err := b.JSON(); !errors.Is(err, ErrInvalidBootstrap) {
			t.Errorf("%s: %v, want ErrInvalidBootstrap", name, err)
		}
	}
	if _, err := ParseBootstrap([]byte("not json")); err == nil {
		t.Errorf("ParseBootstrap of garbage succeeded")
	}
	if _, err := ParseBootstrap([]byte(`{"node":{"metadata":[1]}}`)); err == nil {
		t.Errorf("ParseBootstrap of a metadata list succeeded")
	}
}
