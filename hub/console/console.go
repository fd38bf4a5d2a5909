package console

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// FragmentHeader is the request header by which the page's script asks
// for the <main> element alone; its value is FragmentMain.
const (
	FragmentHeader = "X-Meshfed-Fragment"
	FragmentMain   = "main"
)

// DefaultRefreshInterval is how often an open page refreshes its data.
const DefaultRefreshInterval = 2 * time.Second

// Sources are the documents the console shows; each is called per request.
type Sources struct {
	Registryz   func() debugdoc.Registryz
	Federationz func() debugdoc.Federationz
	// Proxies is the fleet-wide proxy status (every replica's proxies).
	Proxies func() []proxystatus.Record
	Trustz  func() debugdoc.Trustz
	Spokez  func() debugdoc.Spokez
	// Explain answers for a proxy and "HOST[:PORT]" (and a subset) as
	// /debug/explainz does.
	Explain func(proxy, host, subset string) debugdoc.Explainz
	// Configz is the Istio and Gateway API configuration as the replica
	// read it (/debug/configz); nil shows none.
	Configz func() debugdoc.Configz
}

// Options configure a Console.
type Options struct {
	// Replica is the answering hub's replica ID, shown on every page.
	Replica string
	Sources Sources
	// Gatherer is read for the charts: the proxy convergence histogram
	// (meshfed_xds_proxy_convergence_seconds) and pushes per minute
	// (meshfed_xds_pushes_total, sampled by Run).
	Gatherer prometheus.Gatherer
	// RefreshInterval is how often an open page refreshes (default
	// DefaultRefreshInterval).
	RefreshInterval time.Duration
	// PageSize is the number of proxies per page (default 100).
	PageSize int
	Clock    clock.WithTicker
	Log      logr.Logger
}

// Console serves the fleet console.
type Console struct {
	opts  Options
	tmpl  map[string]*template.Template
	mux   *http.ServeMux
	mu    sync.Mutex // guards push
	push  pushSamples
	start time.Time
}

// pages are the views; each is a template file of templates/ that defines
// "title" and "main".
var pages = []string{"overview", "clusters", "cluster", "replicas", "proxies", "proxy", "trust", "explain", "config"}

// New returns a Console, or an error if its templates do not parse.
func New(opts Options) (*Console, error) {
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &Console{opts: opts, tmpl: map[string]*template.Template{}, mux: http.NewServeMux(), start: opts.Clock.Now()}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		c.tmpl[p] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /ui/{$}", c.overview)
	c.mux.HandleFunc("GET /ui/clusters", c.clusters)
	c.mux.HandleFunc("GET /ui/clusters/{id}", c.cluster)
	c.mux.HandleFunc("GET /ui/replicas", c.replicas)
	c.mux.HandleFunc("GET /ui/proxies", c.proxies)
	c.mux.HandleFunc("GET /ui/proxy", c.proxy)
	c.mux.HandleFunc("GET /ui/trust", c.trust)
	c.mux.HandleFunc("GET /ui/explain", c.explain)
	c.mux.HandleFunc("GET /ui/config", c.config)
	return c, nil
}

// ServeHTTP serves / and /ui/... .
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// Run samples the push counter every pushSampleEvery until ctx ends, for
// the pushes-per-minute chart.
func (c *Console) Run(ctx context.Context) {
	t := c.opts.Clock.NewTicker(pushSampleEvery)
	defer t.Stop()
	c.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.sample()
		}
	}
}

func (c *Console) sample() {
	total, ok := counterTotal(c.opts.Gatherer, pushesMetric)
	if !ok {
		return
	}
	c.mu.Lock()
	c.push.add(c.opts.Clock.Now(), total)
	c.mu.Unlock()
}

// page is what every template gets: the view's data and the frame.
type page struct {
	Replica   string
	Now       time.Time
	Nav       string
	RefreshMS int64
	Data      any
}

// render writes view name with data: the whole page, or only its <main>
// when the script asks (FragmentHeader).
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	p := page{Replica: c.opts.Replica, Now: c.opts.Clock.Now().UTC(), Nav: navOf(name), RefreshMS: c.opts.RefreshInterval.Milliseconds(), Data: data}
	tmplName := "layout.html"
	if r.Header.Get(FragmentHeader) == FragmentMain {
		tmplName = "main"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page needs nothing from elsewhere: say so to the browser.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := c.tmpl[name].ExecuteTemplate(w, tmplName, p); err != nil {
		c.opts.Log.Error(err, "rendering console page", "page", name)
	}
}

// navOf is the navigation entry a view belongs to.
func navOf(view string) string {
	switch view {
	case "cluster":
		return "clusters"
	case "proxy":
		return "proxies"
	}
	return view
}
