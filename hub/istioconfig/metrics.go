package istioconfig

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/pkg/istioconfig"
)

// Results of a status write: the result label of
// meshfed_config_status_writes_total.
const (
	WriteOK       = "ok"       // the status was patched
	WriteConflict = "conflict" // the object had changed since it was read; read again and retried
	WriteError    = "error"    // the patch failed; retried later with backoff
)

type metrics struct {
	rejected *prometheus.CounterVec
	objects  *prometheus.GaugeVec
	writes   *prometheus.CounterVec
	warned   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_config_rejected_total",
			Help: "Generations of Istio config objects skipped as invalid, by kind and reason (undecodable, invalid).",
		}, []string{"kind", "reason"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshfed_config_objects",
			Help: "Istio config objects held, by kind and state (applied, rejected, shadowed).",
		}, []string{"kind", "state"}),
		warned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshfed_config_objects_with_warnings",
			Help: "Applied Istio config objects with warnings (what is wrong between them and other objects: a VirtualService naming a missing Gateway, a Gateway server whose port another Gateway of the same proxies serves with another protocol), by kind.",
		}, []string{"kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_config_status_writes_total",
			Help: "Status writes of Istio config objects, by result (ok, conflict, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.rejected, m.objects, m.writes, m.warned} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	// Every series exists from the start, so a rate or an alert on zero
	// needs no absent().
	for _, k := range istioconfig.Kinds {
		for _, r := range []string{ReasonUndecodable, ReasonInvalid} {
			m.rejected.WithLabelValues(k, r)
		}
		for _, s := range States {
			m.objects.WithLabelValues(k, string(s))
		}
		m.warned.WithLabelValues(k)
	}
	for _, r := range []string{WriteOK, WriteConflict, WriteError} {
		m.writes.WithLabelValues(r)
	}
	return m, nil
}

// setObjects sets the gauge from counts by kind and state.
func (m *metrics) setObjects(counts map[istioconfig.Key]State) {
	n := map[[2]string]int{}
	for k, s := range counts {
		n[[2]string{k.Kind, string(s)}]++
	}
	for _, k := range istioconfig.Kinds {
		for _, s := range States {
			m.objects.WithLabelValues(k, string(s)).Set(float64(n[[2]string{k, string(s)}]))
		}
	}
}
