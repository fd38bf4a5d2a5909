package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
)

// explainServer answers /debug/explainz with doc, recording the query.
func explainServer(t *testing.T, doc debugdoc.Explainz, query *string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != debugdoc.ExplainzPath {
			http.NotFound(w, r)
			return
		}
		*query = r.URL.RawQuery
		if err := json.NewEncoder(w).Encode(doc); err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestExplain(t *testing.T) {
	east := model.Locality{Region: "us-east", Zone: "us-east-1a"}
	doc := debugdoc.Explainz{
		Replica: "hub-0", Proxy: "sidecar~10.1.0.5~client.demo~demo.svc.cluster.local", Cluster: "cluster-1",
		Locality: "us-east/us-east-1a/", ServedBy: "hub-1", Host: "echo.demo.svc.cluster.local", Port: 8080,
		Assignment: "outbound|8080||echo.demo.svc.cluster.local",
		Endpoints: []debugdoc.ExplainedEndpoint{
			{Address: "10.1.0.1:50051", Cluster: "cluster-1", Locality: east, Sent: true, Priority: 0, LocalityWeight: 1, Reason: "in the proxy's own cluster cluster-1"},
			{Address: "10.3.0.1:50051", Cluster: "cluster-3", Locality: model.Locality{Region: "eu-west"}, Sent: true, Priority: 1, LocalityWeight: 1, Reason: "another cluster (cluster-3) outside the proxy's region us-east"},
			{Address: "10.1.0.2:50051", Cluster: "cluster-1", Locality: east, Priority: -1, Reason: "not ready"},
		},
	}
	var query string
	url := explainServer(t, doc, &query)
	out, err := runCLI(t, "explain", "--monitoring", url, "--subset", "v1", "client.demo", "echo.demo:8080")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "explain.golden", []byte(out))
	if query != "host=echo.demo%3A8080&proxy=client.demo&subset=v1" {
		t.Errorf("query %q", query)
	}

	doc = debugdoc.Explainz{Replica: "hub-0", Error: `no proxy "nobody.demo" is connected to any replica`}
	url = explainServer(t, doc, &query)
	if _, err := runCLI(t, "explain", "--monitoring", url, "nobody.demo", "echo.demo"); err == nil || !strings.Contains(err.Error(), "nobody.demo") {
		t.Errorf("unknown proxy: %v", err)
	}
	if _, err := parseArgs([]string{"explain", "client.demo"}, io.Discard); err == nil || !strings.Contains(err.Error(), "PROXY HOST[:PORT]") {
		t.Errorf("one argument: %v", err)
	}
}
