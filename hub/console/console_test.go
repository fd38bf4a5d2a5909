package console

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// fleet is a fixture: 3 clusters (one unreachable), 2 replicas, n proxies
// of which the first NACKs LDS.
func fleet(n int) Sources {
	reg := debugdoc.Registryz{Replica: "hub-0",
		Clusters: []debugdoc.RegistryzCluster{
			{ID: "cluster-1", Secret: "istio-system/r1", State: debugdoc.ClusterSynced, Services: 1, Endpoints: 2},
			{ID: "cluster-2", Secret: "istio-system/r2", State: debugdoc.ClusterReplicated, Services: 1, Endpoints: 1, Network: "network-2"},
			{ID: "cluster-3", Secret: "istio-system/r3", State: debugdoc.ClusterUnreachable, Error: "dial tcp 127.0.0.1:1: connection refused", Since: t0.Add(-time.Minute), StalePolicy: "keep", Services: 1, Endpoints: 1},
		},
		SecretErrors: []debugdoc.SecretError{{Secret: "istio-system/bad", Error: "no kubeconfig in it"}},
		Networks: &model.NetworkGateways{Networks: []model.Network{"network-2", "network-3"},
			ByNetwork: map[model.Network][]model.GatewayAddress{"network-2": {{Cluster: "cluster-2", Service: "eastwest.istio-system.svc.cluster.local",
				Address: netip.MustParseAddr("203.0.113.2"), Port: 15443}}},
			Problems: []model.NetworkProblem{{Network: "network-3", Reason: model.ProblemNoGateway, Message: "no gateway"}}},
		Services: []debugdoc.RegistryzService{{Hostname: "echo.demo.svc.cluster.local", Ports: []model.ServicePort{{Name: "grpc", Port: 8080}},
			Endpoints: []model.Endpoint{
				{Cluster: "cluster-1", Locality: model.Locality{Region: "us-east", Zone: "a"}, Ready: true},
				{Cluster: "cluster-1", Locality: model.Locality{Region: "us-east", Zone: "b"}, Ready: false},
				{Cluster: "cluster-2", Locality: model.Locality{Region: "us-east", Zone: "a"}, Ready: true},
			}}},
	}
	fed := debugdoc.Federationz{Self: "hub-0", WatchReplicas: 1,
		Members: []debugdoc.FederationzMember{{ID: "hub-0", Connected: true}, {ID: "hub-1", Connected: true}},
		Clusters: []debugdoc.FederationzCluster{
			{ID: "cluster-1", Owners: []string{"hub-0"}}, {ID: "cluster-2", Owners: []string{"hub-1"}}, {ID: "cluster-3", Owners: []string{"hub-1"}}}}
	synced := proxystatus.TypeStatus{SentNonce: "1", AckedNonce: "1", Status: proxystatus.StatusSynced}
	var recs []proxystatus.Record
	for i := range n {
		r := proxystatus.Record{Proxy: fmt.Sprintf("sidecar~10.0.0.%d~p%04d.demo~demo.svc.cluster.local", i, i), Name: fmt.Sprintf("p%04d.demo", i),
			Cluster: fmt.Sprintf("cluster-%d", 1+i%2), Replica: fmt.Sprintf("hub-%d", i%2), Namespace: "demo",
			Types: map[string]proxystatus.TypeStatus{"cds": synced, "lds": synced, "eds": synced}}
		if i == 0 {
			r.Types["lds"] = proxystatus.TypeStatus{SentNonce: "2", AckedNonce: "1", Nack: "listener 0.0.0.0_80: <bad> filter", Status: proxystatus.StatusError}
		}
		recs = append(recs, r)
	}
	tz := debugdoc.Trustz{Roots: []debugdoc.TrustzRoot{
		{TrustDomain: "cluster.local", Fingerprint: strings.Repeat("ab", 32), NotAfter: t0.Add(365 * 24 * time.Hour).Format(time.RFC3339)},
		{TrustDomain: "cluster.local", Fingerprint: strings.Repeat("cd", 32), NotAfter: t0.Add(10 * 24 * time.Hour).Format(time.RFC3339), RetireAt: t0.Add(time.Hour).Format(time.RFC3339)},
	}}
	return Sources{
		Registryz:   func() debugdoc.Registryz { return reg },
		Federationz: func() debugdoc.Federationz { return fed },
		Proxies:     func() []proxystatus.Record { return append([]proxystatus.Record(nil), recs...) },
		Trustz:      func() debugdoc.Trustz { return tz },
		Spokez: func() debugdoc.Spokez {
			return debugdoc.Spokez{{Cluster: "cluster-1", Version: "v1", Healthy: true, Hubs: []string{"hub-0"}}}
		},
		Explain: func(proxy, host, subset string) debugdoc.Explainz {
			if proxy != "p0001.demo" {
				return debugdoc.Explainz{Replica: "hub-0", Error: fmt.Sprintf("no proxy %q is connected to any replica", proxy)}
			}
			return debugdoc.Explainz{Replica: "hub-0", Proxy: "sidecar~x", Cluster: "cluster-2", ServedBy: "hub-1", Host: host, Assignment: "outbound|8080||" + host,
				Endpoints: []debugdoc.ExplainedEndpoint{
					{Address: "10.2.0.1:50051", Cluster: "cluster-2", Sent: true, Priority: 0, LocalityWeight: 1, Reason: "in the proxy's own cluster cluster-2"},
					{Address: "10.1.0.1:50051", Cluster: "cluster-1", Sent: true, Priority: 1, LocalityWeight: 1, Reason: "another cluster"},
				}}
		},
	}
}

func newConsole(t *testing.T, src Sources, reg *prometheus.Registry) (*Console, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	opts := Options{Replica: "hub-0", Sources: src, Clock: clk, PageSize: 25, Log: testr.New(t)}
	if reg != nil {
		opts.Gatherer = reg
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

func get(t *testing.T, h http.Handler, path string, fragment bool) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if fragment {
		req.Header.Set(FragmentHeader, FragmentMain)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(body)
}

// idText returns the text of the element with the given id.
func idText(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no element #%s in the page", id)
	}
	return m[1]
}

func TestOverview(t *testing.T) {
	c, _ := newConsole(t, fleet(60), nil)
	code, body := get(t, c, "/", false)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, body)
	}
	for id, want := range map[string]string{
		"count-clusters": "3", "count-services": "1", "count-endpoints": "4", "count-replicas": "2", "count-proxies": "60",
		"clusters-synced": "1", "clusters-unreachable": "1", "clusters-replicated": "1",
		"proxies-ERROR": "1", "proxies-SYNCED": "59", "proxies-STALE": "0", "proxies-NOT-SENT": "0", "count-roots": "2",
		"answered-by": "hub-0", "answered-at": "2026-12-02T10:00:00Z",
	} {
		if got := idText(t, body, id); got != want {
			t.Errorf("#%s = %q, want %q", id, got, want)
		}
	}
	// Warnings, critical first: the unreachable cluster, the rejected
	// secret, the NACK (escaped), the root expiring within 30 days; then
	// the retiring root.
	for _, want := range []string{
		"cluster cluster-3 is unreachable since 2026-12-02T09:59:00Z: dial tcp 127.0.0.1:1: connection refused",
		"remote secret istio-system/bad is rejected: no kubeconfig in it",
		"proxy p0000.demo (cluster-1) rejects LDS: listener 0.0.0.0_80: &lt;bad&gt; filter",
		"root cdcdcdcdcdcdcdcd… of cluster.local expires at",
		"root cdcdcdcdcdcdcdcd… of cluster.local is retiring",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks warning %q", want)
		}
	}
	if strings.Index(body, "expires at") > strings.Index(body, "is retiring") {
		t.Error("a critical warning comes after a plain one")
	}
	if !strings.Contains(body, "<html") || !strings.Contains(body, `src="/ui/static/console.js"`) {
		t.Error("the full page lacks its frame")
	}
	// The fragment is <main>'s content alone.
	_, frag := get(t, c, "/", true)
	if strings.Contains(frag, "<html") || !strings.Contains(frag, `id="count-proxies"`) {
		t.Errorf("fragment: %.200s", frag)
	}
}

func TestProxiesFilterAndPaging(t *testing.T) {
	c, _ := newConsole(t, fleet(60), nil)
	_, body := get(t, c, "/ui/proxies", false)
	if got := idText(t, body, "proxies-summary"); !strings.HasPrefix(got, "Showing 1–25 of 60 matching") {
		t.Errorf("summary %q", got)
	}
	if n := strings.Count(body, "<tr data-proxy="); n != 25 {
		t.Errorf("%d rows on page 1, want 25", n)
	}
	if !strings.Contains(body, `href="/ui/proxies?page=2"`) {
		t.Error("no link to page 2")
	}
	_, body = get(t, c, "/ui/proxies?page=3", false)
	if got := idText(t, body, "proxies-summary"); !strings.HasPrefix(got, "Showing 51–60 of 60") {
		t.Errorf("page 3: %q", got)
	}
	_, body = get(t, c, "/ui/proxies?cluster=cluster-2&hub=hub-1", false)
	if got := idText(t, body, "proxies-summary"); !strings.HasPrefix(got, "Showing 1–25 of 30") {
		t.Errorf("cluster-2 on hub-1: %q", got)
	}
	_, body = get(t, c, "/ui/proxies?status=ERROR", false)
	if n := strings.Count(body, "<tr data-proxy="); n != 1 || !strings.Contains(body, "p0000.demo") {
		t.Errorf("ERROR filter: %d rows", n)
	}
	_, body = get(t, c, "/ui/proxies?namespace=other", false)
	if got := idText(t, body, "proxies-summary"); !strings.HasPrefix(got, "No proxy matches") {
		t.Errorf("namespace other: %q", got)
	}
	// The proxy's page shows the NACK message.
	code, body := get(t, c, proxyLink("p0000.demo"), false)
	if code != http.StatusOK || !strings.Contains(body, "listener 0.0.0.0_80: &lt;bad&gt; filter") || idText(t, body, "proxy-status") != "ERROR" {
		t.Errorf("proxy page: %d %.300s", code, body)
	}
	if code, _ := get(t, c, proxyLink("nobody"), false); code != http.StatusNotFound {
		t.Errorf("unknown proxy: %d", code)
	}
}

func TestClustersReplicasTrustExplain(t *testing.T) {
	c, _ := newConsole(t, fleet(4), nil)
	_, body := get(t, c, "/ui/clusters", false)
	for _, want := range []string{`<tr data-cluster="cluster-3">`, "connection refused", "istio-system/bad", "v1, healthy"} {
		if !strings.Contains(body, want) {
			t.Errorf("clusters page lacks %q", want)
		}
	}
	_, body = get(t, c, "/ui/clusters/cluster-1", false)
	if !strings.Contains(body, "us-east/a/: 1 / 1") || !strings.Contains(body, "us-east/b/: 0 / 1") || !strings.Contains(body, "1 / 2") {
		t.Errorf("cluster page: localities missing: %s", body)
	}
	if code, _ := get(t, c, "/ui/clusters/cluster-9", false); code != http.StatusNotFound {
		t.Errorf("unknown cluster: %d", code)
	}
	_, body = get(t, c, "/ui/replicas", false)
	if strings.Count(body, `data-owner="hub-1"`) != 2 || strings.Count(body, `data-owner="hub-0"`) != 1 {
		t.Errorf("ownership matrix: %s", body)
	}
	_, body = get(t, c, "/ui/trust", false)
	if !strings.Contains(body, "retiring") || !strings.Contains(body, "active") {
		t.Error("trust page lacks root states")
	}
	_, body = get(t, c, "/ui/explain?proxy=p0001.demo&host=echo.demo", false)
	rows := regexp.MustCompile(`<tr data-cluster="([^"]+)" data-sent="true">`).FindAllStringSubmatch(body, -1)
	if len(rows) != 2 || rows[0][1] != "cluster-2" {
		t.Errorf("explain rows %v", rows)
	}
	_, body = get(t, c, "/ui/explain?proxy=nobody&host=echo.demo", false)
	if !strings.Contains(body, `no proxy &#34;nobody&#34;`) {
		t.Errorf("explain error: %s", body)
	}
	if code, body := get(t, c, "/ui/static/console.js", false); code != http.StatusOK || !strings.Contains(body, FragmentHeader) {
		t.Errorf("console.js: %d", code)
	}
}

// TestCharts: the convergence chart draws the histogram's buckets, and the
// push chart the counter's rise per minute as Run samples it.
func TestCharts(t *testing.T) {
	reg := prometheus.NewRegistry()
	conv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: convergenceMetric, Buckets: []float64{0.001, 0.01}}, []string{"type"})
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: pushesMetric}, []string{"type"})
	reg.MustRegister(conv, pushes)
	for range 3 {
		conv.WithLabelValues("cds").Observe(0.0005)
	}
	conv.WithLabelValues("eds").Observe(0.005)
	conv.WithLabelValues("eds").Observe(5)
	c, clk := newConsole(t, fleet(1), reg)
	c.sample()
	for i := range 7 {
		pushes.WithLabelValues("eds").Add(10)
		clk.Step(pushSampleEvery)
		c.sample()
		_ = i
	}
	_, body := get(t, c, "/", false)
	for _, want := range []string{"≤1ms: 3", "≤10ms: 1", "≤+Inf: 1", "5 ACKs", "p99 ≤ &#43;Inf", "now: 60", "-1m (10s): 10"} {
		if !strings.Contains(body, want) {
			t.Errorf("charts lack %q", want)
		}
	}
}
