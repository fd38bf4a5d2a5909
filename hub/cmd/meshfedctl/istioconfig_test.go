package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

func configzServer(t *testing.T) string {
	t.Helper()
	doc := debugdoc.Configz{Synced: true, Generation: 4, Objects: []debugdoc.ConfigzObject{
		{Kind: "DestinationRule", Namespace: "demo", Name: "echo", Generation: 2, State: debugdoc.ConfigApplied,
			Notes: []string{"spec.trafficPolicy.loadBalancer.simple: grpc-go has no RANDOM balancer; ROUND_ROBIN used (proxyless gRPC)"}},
		{Kind: "VirtualService", Namespace: "demo", Name: "broken", Generation: 1, State: debugdoc.ConfigRejected, Reason: "undecodable",
			Errors: []debugdoc.ConfigzError{
				{Field: "spec.http[0].route[0].weight", Detail: `must be a number, got "ninety"`},
				{Field: "spec.http[0].route[0].destination.host", Detail: "required"},
			}},
		{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 7, State: debugdoc.ConfigApplied},
		{Kind: "VirtualService", Namespace: "demo", Name: "echo-late", Generation: 1, State: debugdoc.ConfigShadowed,
			ShadowedBy: []debugdoc.ConfigzShadow{{Host: "echo.demo.svc.cluster.local", By: debugdoc.ConfigzKey{Kind: "VirtualService", Namespace: "demo", Name: "echo"}}}},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != debugdoc.ConfigzPath {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestIstioConfig(t *testing.T) {
	url := configzServer(t)
	out, err := runCLI(t, "istio-config", "--monitoring", url)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "istio_config.golden", []byte(out))

	for _, name := range []string{"VirtualService/demo/broken", "vs/demo/echo-late", "dr/demo/echo"} {
		out, err := runCLI(t, "istio-config", "--monitoring", url, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		golden(t, "istio_config_"+strings.ReplaceAll(strings.ToLower(name), "/", "_")+".golden", []byte(out))
	}

	out, err = runCLI(t, "istio-config", "--monitoring", url, "-o", "json", "VirtualService/demo/echo")
	if err != nil {
		t.Fatal(err)
	}
	var o debugdoc.ConfigzObject
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Name != "echo" || o.Generation != 7 || o.State != debugdoc.ConfigApplied {
		t.Errorf("json of one object: %+v %v", o, err)
	}
}

func TestIstioConfigErrors(t *testing.T) {
	url := configzServer(t)
	if _, err := runCLI(t, "istio-config", "--monitoring", url, "VirtualService/demo/nope"); !errors.Is(err, errUnknownObject) {
		t.Errorf("unknown object: %v", err)
	}
	for _, bad := range []string{"VirtualService/echo", "Gateway/demo/gw", "//"} {
		if _, err := runCLI(t, "istio-config", "--monitoring", url, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := parseArgs([]string{"istio-config", "a/b/c", "d/e/f"}, io.Discard); err == nil {
		t.Error("two objects accepted")
	}
}

// TestParseObjectName: every kind the hub reads, by name or Istio's short
// name, in any case; others are refused, naming the kinds.
func TestParseObjectName(t *testing.T) {
	for in, want := range map[string]string{
		"vs/demo/a": "VirtualService", "DestinationRule/demo/a": "DestinationRule",
		"pa/demo/a": "PeerAuthentication", "peerauthentication/demo/a": "PeerAuthentication",
		"AP/demo/a": "AuthorizationPolicy", "AuthorizationPolicy/demo/a": "AuthorizationPolicy",
		"se/demo/a": "ServiceEntry", "ServiceEntry/demo/a": "ServiceEntry", "sidecar/demo/a": "Sidecar",
	} {
		kind, ns, name, err := parseObjectName(in)
		if err != nil || kind != want || ns != "demo" || name != "a" {
			t.Errorf("parseObjectName(%q) = %q %q %q, %v; want %s demo a", in, kind, ns, name, err, want)
		}
	}
	if _, _, _, err := parseObjectName("gw/demo/a"); err == nil || !strings.Contains(err.Error(), "ServiceEntry") {
		t.Errorf("Gateway: %v, want a refusal naming the kinds read", err)
	}
}
