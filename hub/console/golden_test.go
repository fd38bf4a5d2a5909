package console

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// fixture is testdata/fleet.json: the documents a replica's console reads,
// as /debug serves them.
type fixture struct {
	Registryz   debugdoc.Registryz   `json:"registryz"`
	Federationz debugdoc.Federationz `json:"federationz"`
	Proxies     []proxystatus.Record `json:"proxies"`
	Trustz      debugdoc.Trustz      `json:"trustz"`
	Spokez      debugdoc.Spokez      `json:"spokez"`
	// Explainz answers every explain question.
	Explainz debugdoc.Explainz `json:"explainz"`
	Configz  debugdoc.Configz  `json:"configz"`
}

func loadFixture(t *testing.T) Sources {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatalf("testdata/fleet.json: %v", err)
	}
	return Sources{
		Registryz:   func() debugdoc.Registryz { return fx.Registryz },
		Federationz: func() debugdoc.Federationz { return fx.Federationz },
		Proxies:     func() []proxystatus.Record { return append([]proxystatus.Record(nil), fx.Proxies...) },
		Trustz:      func() debugdoc.Trustz { return fx.Trustz },
		Spokez:      func() debugdoc.Spokez { return fx.Spokez },
		Configz:     func() debugdoc.Configz { return fx.Configz },
		Explain: func(proxy, host, subset string) debugdoc.Explainz {
			e := fx.Explainz
			e.Host, e.Subset = host, subset
			return e
		},
	}
}

// TestGoldenViews renders every view of the console from the fixed
// documents of testdata/fleet.json (and fixed metrics for the charts) and
// compares the HTML with testdata/<view>.html, so that a template, a
// function or a view's data cannot change unseen. After an intended change:
// go test ./hub/console -run TestGoldenViews -update, and review the diff.
func TestGoldenViews(t *testing.T) {
	reg := prometheus.NewRegistry()
	conv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: convergenceMetric, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"type"})
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: pushesMetric}, []string{"type"})
	reg.MustRegister(conv, pushes)
	for i, v := range []float64{0.0004, 0.0004, 0.003, 0.003, 0.003, 0.02, 0.4, 9} {
		conv.WithLabelValues([]string{"cds", "eds"}[i%2]).Observe(v)
	}
	c, clk := newConsole(t, loadFixture(t), reg)
	c.sample()
	for i := range 3 {
		pushes.WithLabelValues("eds").Add(float64(5 * (i + 1)))
		clk.Step(pushSampleEvery)
		c.sample()
	}
	for _, v := range []struct{ name, path string }{
		{"overview", "/"},
		{"clusters", "/ui/clusters"},
		{"cluster", "/ui/clusters/cluster-1"},
		{"replicas", "/ui/replicas"},
		{"proxies", "/ui/proxies"},
		{"proxies-error", "/ui/proxies?status=ERROR"},
		{"proxy", proxyLink("p0000.demo")},
		{"trust", "/ui/trust"},
		{"explain-form", "/ui/explain"},
		{"explain", "/ui/explain?proxy=p0001.demo&host=echo.demo:8080"},
		{"config", "/ui/config"},
		{"config-vs", "/ui/config?kind=VirtualService"},
	} {
		t.Run(v.name, func(t *testing.T) {
			code, body := get(t, c, v.path, false)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", v.path, code, body)
			}
			golden := filepath.Join("testdata", v.name+".html")
			if testutil.Updating() {
				if err := os.WriteFile(golden, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if body != string(want) {
				t.Errorf("GET %s differs from %s (run with -update and review the diff):\n%s", v.path, golden, testutil.FirstDiff(string(want), body))
			}
		})
	}
}
