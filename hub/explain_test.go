package hub

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// TestExplainer: a proxy is found by node ID or name among every replica's
// records (the newest wins), its group comes from its record, and short
// hosts, ports and bad queries are handled.
func TestExplainer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	recs := []proxystatus.Record{
		{Proxy: "sidecar~10.1.0.5~client.demo~demo.svc.cluster.local", Name: "client.demo", Cluster: "cluster-1",
			Locality: "us-east/us-east-1a/", Replica: "hub-0", LastChange: t0},
		{Proxy: "sidecar~10.1.0.5~client.demo~demo.svc.cluster.local", Name: "client.demo", Cluster: "cluster-1",
			Locality: "us-east/us-east-1b/", Replica: "hub-1", LastChange: t0.Add(time.Second)},
	}
	var gotGroup xdsgen.ProxyGroup
	var gotHost model.Hostname
	var gotPort uint32
	e := &explainer{replica: "hub-2", domainSuffix: "cluster.local", proxies: func() []proxystatus.Record { return recs },
		explain: func(g xdsgen.ProxyGroup, h model.Hostname, port uint32, _ string) (xdsgen.Explanation, error) {
			gotGroup, gotHost, gotPort = g, h, port
			if h == "missing.demo.svc.cluster.local" {
				return xdsgen.Explanation{}, errors.New("no service missing.demo.svc.cluster.local")
			}
			return xdsgen.Explanation{Assignment: "outbound|8080||" + string(h), Port: 8080, Endpoints: []debugdoc.ExplainedEndpoint{
				{Address: "10.1.0.1:50051", Cluster: "cluster-1", Sent: true, Reason: "own cluster"}}}, nil
		}}

	doc := e.Explain("client.demo", "echo.demo", "")
	if doc.Error != "" || doc.ServedBy != "hub-1" || doc.Replica != "hub-2" || doc.Host != "echo.demo.svc.cluster.local" || doc.Port != 8080 {
		t.Fatalf("explain by name: %+v", doc)
	}
	if want := (xdsgen.ProxyGroup{Cluster: "cluster-1", Region: "us-east", Zone: "us-east-1b"}); gotGroup != want || gotPort != 0 || gotHost != "echo.demo.svc.cluster.local" {
		t.Errorf("asked for %v %s:%d, want group %v and the first port", gotGroup, gotHost, gotPort, want)
	}
	if len(doc.Endpoints) != 1 || doc.Endpoints[0].Address != "10.1.0.1:50051" || !doc.Endpoints[0].Sent {
		t.Errorf("endpoints: %+v", doc.Endpoints)
	}
	if doc := e.Explain(recs[0].Proxy, "echo.demo.svc.cluster.local:9090", ""); doc.Error != "" || gotPort != 9090 {
		t.Errorf("explain by node ID and port: %+v (port %d)", doc, gotPort)
	}
	for _, tc := range []struct{ proxy, host, want string }{
		{"client.demo", "", "no host given"},
		{"client.demo", "echo.demo:http", `port "http"`},
		{"client.demo", "echo.demo:70000", `port "70000"`},
		{"nobody.demo", "echo.demo", `no proxy "nobody.demo"`},
		{"client.demo", "missing.demo", "no service missing.demo"},
	} {
		if doc := e.Explain(tc.proxy, tc.host, ""); !strings.Contains(doc.Error, tc.want) || len(doc.Endpoints) != 0 {
			t.Errorf("Explain(%q, %q): error %q, want it to say %q", tc.proxy, tc.host, doc.Error, tc.want)
		}
	}
}
