package hub

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// explainer answers /debug/explainz from the fleet-wide proxy status (the
// proxy's cluster and locality, whichever replica serves it) and this
// replica's registry and configuration.
type explainer struct {
	replica      string
	domainSuffix string
	proxies      func() []proxystatus.Record
	explain      func(g xdsgen.ProxyGroup, h model.Hostname, port uint32, subset string) (xdsgen.Explanation, error)
}

// serve answers a request with ?proxy=&host=HOST[:PORT]&subset=.
func (e *explainer) serve(r *http.Request) any {
	q := r.URL.Query()
	return e.Explain(q.Get("proxy"), q.Get("host"), q.Get("subset"))
}

// Explain explains what proxy (a node ID or "<pod>.<ns>") is sent for
// hostPort ("HOST[:PORT]"; a HOST of the form "<name>.<ns>" gets the
// domain suffix).
func (e *explainer) Explain(proxy, hostPort, subset string) debugdoc.Explainz {
	doc := debugdoc.Explainz{Replica: e.replica, Subset: subset}
	host, port, err := splitHostPort(hostPort)
	if err != nil {
		doc.Error = err.Error()
		return doc
	}
	if strings.Count(host, ".") == 1 {
		host += ".svc." + e.domainSuffix
	}
	doc.Host, doc.Port = host, port
	rec, ok := findProxy(e.proxies(), proxy)
	if !ok {
		doc.Error = fmt.Sprintf("no proxy %q is connected to any replica", proxy)
		return doc
	}
	doc.Proxy, doc.Cluster, doc.Locality, doc.ServedBy = rec.Proxy, rec.Cluster, rec.Locality, rec.Replica
	doc.Network = rec.Network
	x, err := e.explain(groupOf(rec), model.Hostname(host), port, subset)
	if err != nil {
		doc.Error = err.Error()
		return doc
	}
	doc.Network = string(x.Network)
	doc.Port, doc.Assignment, doc.Endpoints = x.Port, x.Assignment, x.Endpoints
	return doc
}

// splitHostPort splits "HOST[:PORT]"; port 0 when there is none.
func splitHostPort(s string) (string, uint32, error) {
	if s == "" {
		return "", 0, fmt.Errorf("no host given: ask for host=HOST[:PORT]")
	}
	host, portStr, hasPort := strings.Cut(s, ":")
	if !hasPort {
		return host, 0, nil
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("port %q of %q is not a port number", portStr, s)
	}
	return host, uint32(p), nil
}

// findProxy returns the record of the proxy whose node ID or name is q,
// the most recently changed when several replicas report it.
func findProxy(recs []proxystatus.Record, q string) (proxystatus.Record, bool) {
	var best proxystatus.Record
	found := false
	for _, r := range recs {
		if (r.Proxy == q || r.Name == q) && (!found || r.LastChange.After(best.LastChange)) {
			best, found = r, true
		}
	}
	return best, found
}

// groupOf is the proxy group of a status record: its cluster, locality
// and the network it said (when it said none, the explaining server knows
// its cluster's).
func groupOf(r proxystatus.Record) xdsgen.ProxyGroup {
	parts := strings.SplitN(r.Locality, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return xdsgen.ProxyGroup{Cluster: model.ClusterID(r.Cluster), Region: parts[0], Zone: parts[1], SubZone: parts[2],
		Network: model.Network(r.Network)}
}
