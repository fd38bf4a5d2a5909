package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// configStatusDoc is a fleet of two replicas and three clusters: echo is
// STALE on two proxies of cluster-3 (hub-1 is behind) and NACKED by one
// of cluster-1; reviews is synced everywhere; old is deleted; broken is
// refused by the config cluster's reader.
func configStatusDoc() proxystatus.ConfigStatusz {
	return proxystatus.ConfigStatusz{
		Objects: []proxystatus.ObjectRollout{
			{Kind: "DestinationRule", Namespace: "demo", Name: "old", Generation: 3, Deleted: true,
				Proxies: 120, Synced: 120,
				Clusters: []proxystatus.ClusterRollout{{Cluster: "cluster-1", Proxies: 120, Synced: 120}}},
			{Kind: "VirtualService", Namespace: "demo", Name: "broken", Rejected: "generation 2 is refused (invalid)"},
			{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 7,
				Proxies: 120, Synced: 117, Stale: 2, Nacked: 1,
				Clusters: []proxystatus.ClusterRollout{
					{Cluster: "cluster-1", Proxies: 60, Synced: 59, Nacked: 1},
					{Cluster: "cluster-3", Proxies: 60, Synced: 58, Stale: 2},
				},
				Replicas: []proxystatus.ReplicaRollout{
					{Replica: "hub-0", Held: true, Generation: 7, Epoch: 12, Proxies: 118, Synced: 117},
					{Replica: "hub-1", Held: true, Generation: 6, Epoch: 4, Behind: true, Proxies: 2},
					{Replica: "hub-2", Behind: true},
				},
				Pending: []proxystatus.ProxyRollout{
					{Proxy: "sidecar~10.0.0.1~nacker.demo~demo.svc.cluster.local", Name: "nacker.demo", Cluster: "cluster-1",
						Replica: "hub-0", State: proxystatus.RolloutNacked, Reason: "rds: route echo: unknown cluster"},
					{Proxy: "sidecar~10.0.3.1~a.demo~demo.svc.cluster.local", Cluster: "cluster-3",
						Replica: "hub-1", State: proxystatus.RolloutStale, Reason: "replica hub-1 holds generation 6"},
				}},
			{Kind: "VirtualService", Namespace: "demo", Name: "reviews", Generation: 2, Proxies: 120, Synced: 120},
		},
		Replicas: []proxystatus.ReplicaEpoch{
			{Replica: "hub-0", Epoch: 12, Objects: 40, Proxies: 118},
			{Replica: "hub-1", Epoch: 4, Objects: 39, Proxies: 2},
		},
	}
}

// configStatusServer serves configStatusDoc as the hub does: every object
// without a query, with ?kind=&namespace=&name= only that one (none when
// it has no such object). It returns the URL and the queries received.
func configStatusServer(t *testing.T) (string, func() []url.Values) {
	t.Helper()
	var mu sync.Mutex
	var queries []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != debugdoc.ConfigStatusPath {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		mu.Lock()
		queries = append(queries, q)
		mu.Unlock()
		doc := configStatusDoc()
		if q.Get("name") != "" {
			var one []proxystatus.ObjectRollout
			for _, o := range doc.Objects {
				if o.Kind == q.Get("kind") && o.Namespace == q.Get("namespace") && o.Name == q.Get("name") {
					one = append(one, o)
				}
			}
			doc.Objects = one
		} else {
			for i := range doc.Objects {
				doc.Objects[i].Pending = nil
			}
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []url.Values {
		mu.Lock()
		defer mu.Unlock()
		return queries
	}
}

// squeeze collapses the runs of blanks of every line, so that the tests
// compare the cells of a table, not its alignment.
func squeeze(out string) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return lines
}

// TestConfigStatusTable checks the table of every object and the detail
// of one, line by line, and the query the hub was sent.
func TestConfigStatusTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		query url.Values
		want  []string
	}{
		{
			name:  "all objects",
			query: url.Values{},
			want: []string{
				"KIND NAMESPACE NAME GEN PROXIES SYNCED STALE NACKED DETAIL",
				"DestinationRule demo old 3 120 120 0 0 deleted",
				"VirtualService demo broken - 0 0 0 0 generation 2 is refused (invalid)",
				"VirtualService demo echo 7 120 117 2 1 STALE in cluster-3 (2); NACKED in cluster-1 (1)",
				"VirtualService demo reviews 2 120 120 0 0 -",
				"",
				"replica hub-0: epoch 12, 40 objects, 118 proxies",
				"replica hub-1: epoch 4, 39 objects, 2 proxies",
			},
		},
		{
			name:  "one object",
			args:  []string{"vs/demo/echo"},
			query: url.Values{"kind": {"VirtualService"}, "namespace": {"demo"}, "name": {"echo"}},
			want: []string{
				"VirtualService demo/echo gen 7: 117/120 proxies, 2 STALE in cluster-3, 1 NACKED in cluster-1",
				"",
				"CLUSTER PROXIES SYNCED STALE NACKED",
				"cluster-1 60 59 0 1",
				"cluster-3 60 58 2 0",
				"",
				"REPLICA GENERATION EPOCH PROXIES SYNCED NOTE",
				"hub-0 7 12 118 117 -",
				"hub-1 6 4 2 0 behind",
				"hub-2 - - 0 0 behind, not read",
				"",
				"PROXY CLUSTER REPLICA STATE REASON",
				"nacker.demo cluster-1 hub-0 NACKED rds: route echo: unknown cluster",
				"sidecar~10.0.3.1~a.demo~demo.svc.cluster.local cluster-3 hub-1 STALE replica hub-1 holds generation 6",
			},
		},
		{
			name:  "one rejected object, never rolled out",
			args:  []string{"VIRTUALSERVICE/demo/broken"},
			query: url.Values{"kind": {"VirtualService"}, "namespace": {"demo"}, "name": {"broken"}},
			want: []string{
				"VirtualService demo/broken gen 0: 0/0 proxies",
				"Rejected: generation 2 is refused (invalid)",
			},
		},
		{
			name:  "one deleted object",
			args:  []string{"dr/demo/old"},
			query: url.Values{"kind": {"DestinationRule"}, "namespace": {"demo"}, "name": {"old"}},
			want: []string{
				"DestinationRule demo/old gen 3 (deleted): 120/120 proxies",
				"",
				"CLUSTER PROXIES SYNCED STALE NACKED",
				"cluster-1 120 120 0 0",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, queries := configStatusServer(t)
			out, err := runCLI(t, append([]string{"config-status", "--monitoring", addr}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := squeeze(out); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("output:\n%s\nwant (blanks squeezed):\n%s", out, strings.Join(tc.want, "\n"))
			}
			if q := queries(); len(q) != 1 || !reflect.DeepEqual(q[0], tc.query) {
				t.Errorf("queries %v, want one: %v", q, tc.query)
			}
		})
	}
}

// TestConfigStatusUnknownObject: an object the hub does not report is an
// error naming it and the hub; a malformed one is refused before asking.
func TestConfigStatusUnknownObject(t *testing.T) {
	addr, queries := configStatusServer(t)
	for _, output := range []string{outputTable, outputJSON} {
		out, err := runCLI(t, "config-status", "--monitoring", addr, "-o", output, "VirtualService/demo/nope")
		if !errors.Is(err, errUnknownObject) || !strings.Contains(err.Error(), "VirtualService/demo/nope") || !strings.Contains(err.Error(), addr) {
			t.Errorf("-o %s: %v; want %v naming the object and %s", output, err, errUnknownObject, addr)
		}
		if out != "" {
			t.Errorf("-o %s: wrote %q", output, out)
		}
	}
	if q := queries(); len(q) != 2 || q[0].Get("name") != "nope" {
		t.Errorf("queries %v", q)
	}
	for _, bad := range []string{"VirtualService/echo", "Gateway/demo/gw"} {
		if _, err := runCLI(t, "config-status", "--monitoring", addr, bad); err == nil || errors.Is(err, errUnknownObject) {
			t.Errorf("%q: %v, want a malformed-name error", bad, err)
		}
	}
	if q := queries(); len(q) != 2 {
		t.Errorf("a malformed name asked the hub: %v", q)
	}
	if _, err := runCLI(t, "config-status", "--monitoring", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable hub: %v", err)
	}
}

// TestConfigStatusJSON: -o json writes the document as the hub returned
// it, or the one object alone, Pending included.
func TestConfigStatusJSON(t *testing.T) {
	addr, _ := configStatusServer(t)

	out, err := runCLI(t, "config-status", "--monitoring", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc proxystatus.ConfigStatusz
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := configStatusDoc()
	for i := range want.Objects {
		want.Objects[i].Pending = nil
	}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("json:\n%s\nwant %+v", out, want)
	}

	out, err = runCLI(t, "config-status", "--monitoring", addr, "-o", "json", "VirtualService/demo/echo")
	if err != nil {
		t.Fatal(err)
	}
	var o proxystatus.ObjectRollout
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatal(err)
	}
	if wantObj := configStatusDoc().Objects[2]; !reflect.DeepEqual(o, wantObj) {
		t.Errorf("json of one object:\n%s\nwant %+v", out, wantObj)
	}
	if len(o.Pending) != 2 || o.Pending[0].State != proxystatus.RolloutNacked {
		t.Errorf("pending: %+v", o.Pending)
	}
}

// TestParseArgsConfigStatus: config-status takes --monitoring, -o and one
// object, and nothing else.
func TestParseArgsConfigStatus(t *testing.T) {
	got, err := parseArgs([]string{"config-status", "vs/demo/echo", "-o", "json", "--monitoring", "h:1"}, io.Discard)
	want := DefaultOptions()
	want.Command, want.Object, want.Output, want.Monitoring = cmdConfigStatus, "vs/demo/echo", outputJSON, "h:1"
	if err != nil || got != want {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range [][]string{
		{"config-status", "a/b/c", "d/e/f"},
		{"config-status", "--hub", "h:1"},
		{"config-status", "--wait"},
		{"config-status", "-o", "pem"},
	} {
		if _, err := parseArgs(bad, &strings.Builder{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
