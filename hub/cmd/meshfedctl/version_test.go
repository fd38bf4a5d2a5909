package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/version"
)

// TestVersion: with --client, version prints meshfedctl's build; with --monitoring
// also every replica's from /debug/federationz, and names the builds of a
// mixed fleet.
func TestVersion(t *testing.T) {
	own := "meshfedctl " + version.Get().String() + "\n"
	out, err := runCLI(t, "version", "--client")
	if err != nil || out != own {
		t.Fatalf("version = %q, %v; want %q", out, err, own)
	}

	fed := debugdoc.Federationz{Self: "hub-0", Members: []debugdoc.FederationzMember{
		{ID: "hub-2", Version: "v0.2.0"}, {ID: "hub-0", Version: "v0.1.0"}, {ID: "hub-1", Version: "v0.1.0"}, {ID: "hub-3"},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != debugdoc.FederationzPath {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(fed)
	}))
	defer srv.Close()
	out, err = runCLI(t, "version", "--monitoring", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rest, ok := strings.CutPrefix(out, own)
	if !ok {
		t.Fatalf("output does not start with meshfedctl's own version:\n%s", out)
	}
	golden(t, "version.golden", []byte(rest))

	out, err = runCLI(t, "version", "--monitoring", srv.URL, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc versionDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if doc.Client != version.Get() || doc.Builds != 3 || len(doc.Replicas) != 4 || doc.Replicas[1] != (replicaVersion{"hub-0", "v0.1.0"}) {
		t.Errorf("json: %+v", doc)
	}
	if _, err := runCLI(t, "version", "--monitoring", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable hub: %v, want an error naming it", err)
	}
}
