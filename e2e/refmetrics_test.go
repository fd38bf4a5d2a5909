package e2e

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/pkg/kubegates"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/spoke"
)

// recordingRegistry is a prometheus.Registry that keeps every collector
// registered in it: a Gather shows only the vectors that have a child,
// while the reference lists every metric the hub can export.
type recordingRegistry struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recordingRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// metricDoc is one metric family of the reference.
type metricDoc struct {
	Name, Type, Help string
	Labels           []string
}

// descFields reads what prometheus.Desc.String prints (client_golang
// v1.25); the Desc's fields are not exported otherwise.
var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func parseDesc(d *prometheus.Desc) (metricDoc, error) {
	m := descFields.FindStringSubmatch(d.String())
	if m == nil {
		return metricDoc{}, fmt.Errorf("unreadable descriptor %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return metricDoc{}, err
	}
	help, err := strconv.Unquote(m[2])
	if err != nil {
		return metricDoc{}, err
	}
	doc := metricDoc{Name: name, Help: help}
	for _, l := range strings.Split(m[4], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			doc.Labels = append(doc.Labels, l)
		}
	}
	return doc, nil
}

// metricType names the type of a written metric.
func metricType(m prometheus.Metric) string {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return "untyped"
	}
	switch {
	case d.Counter != nil:
		return "counter"
	case d.Gauge != nil:
		return "gauge"
	case d.Histogram != nil:
		return "histogram"
	case d.Summary != nil:
		return "summary"
	}
	return "untyped"
}

// metricDocs lists every family the collectors describe, with its type:
// from the vector's kind, else from what the collector collects now.
func metricDocs(collectors []prometheus.Collector) ([]metricDoc, error) {
	byName := map[string]metricDoc{}
	for _, c := range collectors {
		kind := ""
		switch c.(type) {
		case *prometheus.CounterVec:
			kind = "counter"
		case *prometheus.GaugeVec:
			kind = "gauge"
		case *prometheus.HistogramVec:
			kind = "histogram"
		case *prometheus.SummaryVec:
			kind = "summary"
		}
		collected := map[string]string{} // name → type
		if kind == "" {
			ch := make(chan prometheus.Metric)
			go func() { c.Collect(ch); close(ch) }()
			for m := range ch {
				if d, err := parseDesc(m.Desc()); err == nil {
					collected[d.Name] = metricType(m)
				}
			}
		}
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		var errs []error
		for d := range ch {
			doc, err := parseDesc(d)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			doc.Type = cmp.Or(kind, collected[doc.Name], "untyped")
			byName[doc.Name] = doc
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	docs := slices.Collect(maps.Values(byName))
	slices.SortFunc(docs, func(a, b metricDoc) int { return strings.Compare(a.Name, b.Name) })
	return docs, nil
}

// runtimeMetric tells the Go runtime's and the process's standard
// families, listed together rather than one by one.
func runtimeMetric(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// metricsTable renders one binary's families, the Go runtime's and the
// process's standard ones summed up in a line after the table.
func metricsTable(b *bytes.Buffer, docs []metricDoc) {
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	var runtime []string
	for _, d := range docs {
		if runtimeMetric(d.Name) {
			runtime = append(runtime, d.Name)
			continue
		}
		labels := make([]string, len(d.Labels))
		for i, l := range d.Labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, strings.Join(labels, ", "), cell(d.Help))
	}
	if len(runtime) > 0 {
		fmt.Fprintf(b, "\nBeside them, %d standard families of the Go runtime and the process (client_golang's collectors), `%s` … `%s`.\n",
			len(runtime), runtime[0], runtime[len(runtime)-1])
	}
}

// metricsPage renders the metrics reference of the hub and the spoke.
func metricsPage(hubDocs, spokeDocs []metricDoc) []byte {
	var b bytes.Buffer
	b.WriteString("# Metrics\n\n")
	b.WriteString("<!-- Generated by `make docs` from the collectors a running hub and spoke register (e2e/refmetrics_test.go); do not edit. -->\n\n")
	b.WriteString("Every metric family meshfed exports. A family with labels appears on\n")
	b.WriteString("`/metrics` once it has a first sample.\n\n")
	b.WriteString("- [meshfed-hub](#meshfed-hub): `/metrics` of the monitoring port (`--monitoring-addr`, 15014), open to all\n")
	b.WriteString("- [meshfed-spoke](#meshfed-spoke): `/metrics` of its HTTPS port (`--listen-addr`, 15017)\n")
	b.WriteString("\n## meshfed-hub\n\n")
	metricsTable(&b, hubDocs)
	b.WriteString("\n## meshfed-spoke\n\n")
	metricsTable(&b, spokeDocs)
	return b.Bytes()
}

// gathered returns the value of the sample of family name whose labels
// hold want (nil: any), and whether there is one.
func gathered(g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	families, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
			return 0, true
		}
	}
	return 0, false
}

// runInProcess runs fn in a goroutine until the test ends, then cancels
// it and waits for it to return.
func runInProcess(t *testing.T, what string, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", what)
		}
	})
}

// collectorsOf returns what reg recorded so far.
func collectorsOf(reg *recordingRegistry) []prometheus.Collector {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return slices.Clone(reg.collectors)
}

// referenceMetrics runs a hub and a spoke in this process against a fleet
// of one remote cluster, and returns the registries they registered their
// collectors in, once every part has worked once: the hub ready with the
// cluster synced and a network gateway seen, the spoke's shim connected to
// the hub's CA port and its webhooks serving.
func referenceMetrics(t *testing.T) (hubReg, spokeReg *recordingRegistry) {
	t.Helper()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx := t.Context()
	r := f.Remotes()[0]
	// A network gateway, so that the collectors of the networks' view have
	// a sample to show their type by.
	if err := r.EnsureNamespace(ctx, "istio-system"); err != nil {
		t.Fatal(err)
	}
	if err := r.Client().Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "eastwest",
			Labels: map[string]string{model.LabelTopologyNetwork: "network-1"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tls", Port: model.DefaultGatewayPort}},
			ExternalIPs: []string{"192.0.2.10"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remotes", r); err != nil {
		t.Fatal(err)
	}
	// What main sets for the process before it runs the hub or the spoke.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	kubegates.DisableWatchList()

	addrs, err := framework.FreeAddrs(5)
	if err != nil {
		t.Fatal(err)
	}
	hubReg = &recordingRegistry{Registry: prometheus.NewRegistry()}
	hopts := hub.DefaultOptions()
	hopts.Kubeconfig = f.Config().KubeconfigFile()
	hopts.Namespace = framework.RemoteSecretNamespace
	hopts.ReplicaID = federation.ReplicaID("reference")
	hopts.MonitoringAddr, hopts.GossipAddr, hopts.PeerAddr, hopts.CAAddr = addrs[0], addrs[1], addrs[2], addrs[3]
	hopts.Metrics = hubReg
	runInProcess(t, "hub", func(ctx context.Context) error { return hub.Run(ctx, hopts) })
	testutil.Eventually(t, time.Minute, poll, func() error {
		if v, _ := gathered(hubReg, "meshfed_remote_clusters", map[string]string{"state": "synced"}); v != 1 {
			return errors.New("the hub has not synced the remote cluster yet")
		}
		if v, _ := gathered(hubReg, "meshfed_network_gateway_addresses", nil); v != 1 {
			return errors.New("the hub has not seen the network gateway yet")
		}
		return nil
	})

	if err := r.EnsureServiceAccount(ctx, "istio-system", "meshfed-spoke"); err != nil {
		t.Fatal(err)
	}
	spokeReg = &recordingRegistry{Registry: prometheus.NewRegistry()}
	// What spoke.Run registers in a registry of its own.
	spokeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sopts := spoke.DefaultOptions()
	sopts.ListenAddr = addrs[4]
	sopts.RESTConfig = r.RESTConfig()
	sopts.Metrics = spokeReg
	sopts.WebhookConfigs = spoke.WebhookConfigs{Mutating: "meshfed-spoke-injector", Validating: "meshfed-spoke-validator"}
	sopts.Shim.HubAddr = hopts.CAAddr
	sopts.Shim.HubRoots = caRootsOf(t, f)
	sopts.Shim.ClusterID = string(r.ID)
	sopts.Shim.TokenFunc = func(ctx context.Context) (string, error) {
		return r.ServiceAccountToken(ctx, "istio-system", "meshfed-spoke", framework.CertAudience)
	}
	runInProcess(t, "spoke", func(ctx context.Context) error { return spoke.Run(ctx, sopts) })
	testutil.Eventually(t, time.Minute, poll, func() error {
		if v, _ := gathered(spokeReg, "meshfed_spoke_trust_bundle_connected", nil); v != 1 {
			return errors.New("the spoke's shim has not connected to the hub yet")
		}
		return nil
	})
	return hubReg, spokeReg
}

// testMetricsReference is TestReferenceDocs' metrics page, with the check
// that every family the binaries serve is on it.
func testMetricsReference(t *testing.T) {
	hubReg, spokeReg := referenceMetrics(t)
	var pages [2][]metricDoc
	for i, reg := range []*recordingRegistry{hubReg, spokeReg} {
		docs, err := metricDocs(collectorsOf(reg))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			// The runtime's families are listed by name only: their
			// types are client_golang's business.
			if d.Type == "untyped" && !runtimeMetric(d.Name) {
				t.Errorf("%s: its collector collected no sample here, so its type is unknown: give the reference fleet what makes it collect one", d.Name)
			}
		}
		pages[i] = docs
	}
	page := metricsPage(pages[0], pages[1])
	checkReference(t, "metrics.md", page)
	for _, reg := range []*recordingRegistry{hubReg, spokeReg} {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if name := mf.GetName(); !runtimeMetric(name) && !bytes.Contains(page, []byte("| `"+name+"` |")) {
				t.Errorf("/metrics serves %s, which the reference does not list", name)
			}
		}
	}
}
