package remotesecret

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshfed/meshfed/pkg/model"
)

func kubeconfig(t testing.TB, mutate func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("ca")}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret-token"}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	if mutate != nil {
		mutate(cfg)
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	good := kubeconfig(t, nil)
	tests := []struct {
		name        string
		data        map[string][]byte
		wantErr     error
		wantGood    []model.ClusterID
		wantInvalid map[model.ClusterID]error
	}{
		{name: "empty secret", data: nil, wantErr: ErrNoClusters},
		{name: "one cluster", data: map[string][]byte{"cluster-1": good}, wantGood: []model.ClusterID{"cluster-1"}},
		{
			name:     "two clusters in one secret",
			data:     map[string][]byte{"cluster-2": good, "cluster-1": good},
			wantGood: []model.ClusterID{"cluster-1", "cluster-2"},
		},
		{
			name:        "malformed entry does not hide the good one",
			data:        map[string][]byte{"good": good, "bad": []byte("{not yaml: [")},
			wantGood:    []model.ClusterID{"good"},
			wantInvalid: map[model.ClusterID]error{"bad": ErrInvalidKubeconfig},
		},
		{name: "empty kubeconfig", data: map[string][]byte{"c": nil}, wantInvalid: map[model.ClusterID]error{"c": ErrInvalidKubeconfig}},
		{name: "bad cluster ID", data: map[string][]byte{"a b": good}, wantInvalid: map[model.ClusterID]error{"a b": ErrInvalidClusterID}},
		{
			name:        "no current context",
			data:        map[string][]byte{"c": kubeconfig(t, func(c *clientcmdapi.Config) { c.CurrentContext = "" })},
			wantInvalid: map[model.ClusterID]error{"c": ErrInvalidKubeconfig},
		},
		{
			name: "context names a missing cluster",
			data: map[string][]byte{"c": kubeconfig(t, func(c *clientcmdapi.Config) {
				c.Contexts["ctx"].Cluster = "nope"
			})},
			wantInvalid: map[model.ClusterID]error{"c": ErrInvalidKubeconfig},
		},
		{
			name: "exec plugin refused",
			data: map[string][]byte{"c": kubeconfig(t, func(c *clientcmdapi.Config) {
				c.AuthInfos["u"].Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
			})},
			wantInvalid: map[model.ClusterID]error{"c": ErrInvalidKubeconfig},
		},
		{
			name: "token file refused",
			data: map[string][]byte{"c": kubeconfig(t, func(c *clientcmdapi.Config) {
				c.AuthInfos["u"].TokenFile = "/var/run/secrets/token"
			})},
			wantInvalid: map[model.ClusterID]error{"c": ErrInvalidKubeconfig},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.data)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse() error = %v, want %v", err, tc.wantErr)
			}
			var ids []model.ClusterID
			for _, c := range got.Clusters {
				ids = append(ids, c.ID)
				if c.Config == nil || c.Config.Host != "https://127.0.0.1:6443" || c.Config.BearerToken != "secret-token" {
					t.Errorf("cluster %s: config = %+v", c.ID, c.Config)
				}
			}
			if strings.Join(idStrings(ids), ",") != strings.Join(idStrings(tc.wantGood), ",") {
				t.Errorf("clusters = %v, want %v", ids, tc.wantGood)
			}
			if len(got.Invalid) != len(tc.wantInvalid) {
				t.Fatalf("invalid = %v, want %v", got.Invalid, tc.wantInvalid)
			}
			for _, inv := range got.Invalid {
				want, ok := tc.wantInvalid[inv.ID]
				if !ok || !errors.Is(inv.Err, want) {
					t.Errorf("invalid %s: %v, want %v", inv.ID, inv.Err, want)
				}
				if !strings.Contains(inv.Err.Error(), string(inv.ID)) && want != ErrInvalidClusterID {
					t.Errorf("error %q does not name cluster %s", inv.Err, inv.ID)
				}
			}
		})
	}
}

func idStrings(ids []model.ClusterID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// FuzzParse feeds arbitrary bytes as a kubeconfig: Parse must never panic,
// and every entry must come out either usable (with a config) or rejected
// with a cause that wraps one of the package's errors.
func FuzzParse(f *testing.F) {
	f.Add("cluster-1", kubeconfig(f, nil))
	f.Add("c", []byte("apiVersion: v1\nkind: Config\n"))
	f.Add("x", []byte("{"))
	f.Add("", []byte("clusters: [{name: a, cluster: {server: 'http://[::1'}}]"))
	f.Fuzz(func(t *testing.T, key string, kc []byte) {
		got, err := Parse(map[string][]byte{key: kc})
		if err != nil {
			t.Fatalf("one entry must not fail the whole secret: %v", err)
		}
		if len(got.Clusters)+len(got.Invalid) != 1 {
			t.Fatalf("entry lost: %+v", got)
		}
		for _, c := range got.Clusters {
			if c.Config == nil {
				t.Fatalf("usable cluster %q without config", c.ID)
			}
		}
		for _, inv := range got.Invalid {
			if !errors.Is(inv.Err, ErrInvalidKubeconfig) && !errors.Is(inv.Err, ErrInvalidClusterID) {
				t.Fatalf("cause %v wraps no package error", inv.Err)
			}
		}
	})
}

func TestTokenExpiry(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		token string
		want  time.Time
	}{
		{enc(`{"alg":"RS256"}`) + "." + enc(`{"exp":1700000000,"sub":"x"}`) + ".sig", time.Unix(1700000000, 0).UTC()},
		{enc(`{}`) + "." + enc(`{"sub":"no-exp"}`) + ".sig", time.Time{}},
		{"opaque-static-token", time.Time{}},
		{"a.!!!.c", time.Time{}},
	} {
		if got := TokenExpiry(tc.token); !got.Equal(tc.want) {
			t.Errorf("TokenExpiry(%q) = %v, want %v", tc.token, got, tc.want)
		}
	}
}
