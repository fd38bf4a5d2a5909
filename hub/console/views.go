package console

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// statuses are the proxy statuses in the order the console lists them,
// worst first.
var statuses = []proxystatus.Status{proxystatus.StatusError, proxystatus.StatusStale, proxystatus.StatusNotSent, proxystatus.StatusSynced}

// overallStatus is a proxy's status over the table's types: ERROR if one
// type is in error, else STALE if one is stale, else SYNCED if one is
// synced, else NOT SENT.
func overallStatus(r proxystatus.Record) proxystatus.Status {
	seen := map[proxystatus.Status]bool{}
	for _, t := range proxystatus.TableTypes() {
		seen[r.Status(t)] = true
	}
	for _, s := range []proxystatus.Status{proxystatus.StatusError, proxystatus.StatusStale, proxystatus.StatusSynced} {
		if seen[s] {
			return s
		}
	}
	return proxystatus.StatusNotSent
}

// namespaceOf is the proxy's namespace: its NAMESPACE metadata, else the
// part after the dot of its "<pod>.<ns>" name.
func namespaceOf(r proxystatus.Record) string {
	if r.Namespace != "" {
		return r.Namespace
	}
	if _, ns, ok := strings.Cut(r.Name, "."); ok {
		return ns
	}
	return ""
}

// Warning is one line of the overview's warnings, most severe first.
type Warning struct {
	// Level is "critical" or "warning", shown as text, not only as colour.
	Level string
	Text  string
	// Link is the page that tells more.
	Link string
}

// count is a label and a number, with the id the page gives the number.
type count struct {
	Label string
	ID    string
	N     int
}

type overviewData struct {
	Warnings       []Warning
	ClusterStates  []count
	Clusters       int
	Services       int
	Endpoints      int
	Replicas       int
	ProxyStatuses  []count
	Proxies        int
	Roots          int
	SoonestExpiry  time.Time
	SoonestRoot    string
	Convergence    chartSVG
	PushesPerMin   chartSVG
	ConvergenceSum histogramSummary
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	now := c.opts.Clock.Now()
	reg := c.opts.Sources.Registryz()
	fed := c.opts.Sources.Federationz()
	recs := c.opts.Sources.Proxies()
	tz := c.opts.Sources.Trustz()
	spokes := c.opts.Sources.Spokez()

	d := overviewData{Clusters: len(reg.Clusters), Services: len(reg.Services), Replicas: len(fed.Members), Proxies: len(recs), Roots: len(tz.Roots)}
	d.Warnings = warnings(now, reg, fed, recs, tz, spokes)
	byState := map[debugdoc.ClusterState]int{}
	for _, cl := range reg.Clusters {
		byState[cl.State]++
		d.Endpoints += cl.Endpoints
	}
	for _, s := range debugdoc.ClusterStates {
		if n := byState[s]; n > 0 {
			d.ClusterStates = append(d.ClusterStates, count{Label: string(s), ID: "clusters-" + string(s), N: n})
		}
	}
	byStatus := map[proxystatus.Status]int{}
	for _, rec := range recs {
		byStatus[overallStatus(rec)]++
	}
	for _, s := range statuses {
		d.ProxyStatuses = append(d.ProxyStatuses, count{Label: string(s), ID: "proxies-" + strings.ReplaceAll(string(s), " ", "-"), N: byStatus[s]})
	}
	for _, root := range tz.Roots {
		t, err := time.Parse(time.RFC3339, root.NotAfter)
		if err == nil && (d.SoonestExpiry.IsZero() || t.Before(d.SoonestExpiry)) {
			d.SoonestExpiry, d.SoonestRoot = t, root.Fingerprint
		}
	}
	h := convergenceHistogram(c.opts.Gatherer)
	d.Convergence, d.ConvergenceSum = h.svg(), h.summary()
	c.mu.Lock()
	d.PushesPerMin = c.push.perMinute().svg()
	c.mu.Unlock()
	c.render(w, r, "overview", d)
}

// warnings lists what needs a look, most severe first: clusters not
// served, rejected secrets, NACKing proxies, spokes down, replicas
// suspected, roots retiring or expiring within 30 days.
func warnings(now time.Time, reg debugdoc.Registryz, fed debugdoc.Federationz, recs []proxystatus.Record, tz debugdoc.Trustz, spokes debugdoc.Spokez) []Warning {
	var crit, warn []Warning
	for _, cl := range reg.Clusters {
		link := "/ui/clusters/" + url.PathEscape(string(cl.ID))
		since := ""
		if !cl.Since.IsZero() {
			since = " since " + cl.Since.UTC().Format(time.RFC3339)
		}
		switch cl.State {
		case debugdoc.ClusterUnreachable, debugdoc.ClusterInvalid, debugdoc.ClusterTimeout:
			crit = append(crit, Warning{"critical", fmt.Sprintf("cluster %s is %s%s: %s", cl.ID, cl.State, since, cl.Error), link})
		case debugdoc.ClusterCredentialExpiring:
			warn = append(warn, Warning{"warning", fmt.Sprintf("cluster %s: the token of secret %s expires at %s; rotate it", cl.ID, cl.Secret, cl.CredentialExpiry.UTC().Format(time.RFC3339)), link})
		case debugdoc.ClusterSyncing:
			warn = append(warn, Warning{"warning", fmt.Sprintf("cluster %s is still syncing%s", cl.ID, since), link})
		}
		if !cl.EndpointsDropped.IsZero() {
			crit = append(crit, Warning{"critical", fmt.Sprintf("cluster %s: its endpoints were dropped at %s (%s)", cl.ID, cl.EndpointsDropped.UTC().Format(time.RFC3339), cl.StalePolicy), link})
		}
	}
	for _, e := range reg.SecretErrors {
		crit = append(crit, Warning{"critical", fmt.Sprintf("remote secret %s is rejected: %s", e.Secret, e.Error), "/ui/clusters"})
	}
	const maxNACKs = 10
	nacking := 0
	for _, rec := range recs {
		for _, t := range proxystatus.DetailTypes(rec) {
			ts := rec.Types[t]
			if rec.Status(t) != proxystatus.StatusError {
				continue
			}
			nacking++
			if nacking <= maxNACKs {
				crit = append(crit, Warning{"critical", fmt.Sprintf("proxy %s (%s) rejects %s: %s", displayName(rec), rec.Cluster, strings.ToUpper(t), ts.Nack), proxyLink(rec.Proxy)})
			}
			break
		}
	}
	if nacking > maxNACKs {
		crit = append(crit, Warning{"critical", fmt.Sprintf("and %d more proxies reject config", nacking-maxNACKs), "/ui/proxies?status=ERROR"})
	}
	for _, sp := range spokes {
		if !sp.Healthy {
			warn = append(warn, Warning{"warning", fmt.Sprintf("the spoke of cluster %s has no open stream (last seen %s)", sp.Cluster, sp.LastSeen.UTC().Format(time.RFC3339)), "/ui/clusters/" + url.PathEscape(string(sp.Cluster))})
		}
	}
	if vs := fed.Versions(); len(vs) > 1 {
		var parts []string
		for _, v := range vs {
			parts = append(parts, fmt.Sprintf("%s on %s", cmp.Or(v.Version, "unknown"), strings.Join(v.Replicas, ", ")))
		}
		warn = append(warn, Warning{"warning", fmt.Sprintf("the replicas run %d builds: %s", len(vs), strings.Join(parts, "; ")), "/ui/replicas"})
	}
	for _, s := range fed.Suspects {
		warn = append(warn, Warning{"warning", fmt.Sprintf("replica %s is suspected gone: its peer stream broke", s), "/ui/replicas"})
	}
	for _, root := range tz.Roots {
		if root.RetireAt != "" {
			warn = append(warn, Warning{"warning", fmt.Sprintf("root %s of %s is retiring: it leaves the bundle at %s", short(root.Fingerprint), root.TrustDomain, root.RetireAt), "/ui/trust"})
		}
		if t, err := time.Parse(time.RFC3339, root.NotAfter); err == nil && t.Sub(now) < 30*24*time.Hour {
			crit = append(crit, Warning{"critical", fmt.Sprintf("root %s of %s expires at %s", short(root.Fingerprint), root.TrustDomain, root.NotAfter), "/ui/trust"})
		}
	}
	return append(crit, warn...)
}

func displayName(r proxystatus.Record) string { return cmp.Or(r.Name, r.Proxy) }

func proxyLink(id string) string { return "/ui/proxy?" + url.Values{"id": {id}}.Encode() }

func short(fp string) string {
	if len(fp) > 16 {
		return fp[:16] + "…"
	}
	return fp
}

// clusterRow is one cluster on the clusters page.
type clusterRow struct {
	debugdoc.RegistryzCluster
	Owners []string
	Spoke  *debugdoc.Spoke
}

func (c *Console) clusterRows() ([]clusterRow, debugdoc.Registryz) {
	reg := c.opts.Sources.Registryz()
	fed := c.opts.Sources.Federationz()
	spokes := c.opts.Sources.Spokez()
	rows := make([]clusterRow, 0, len(reg.Clusters))
	for _, cl := range reg.Clusters {
		row := clusterRow{RegistryzCluster: cl, Owners: fed.Owners(cl.ID)}
		if sp, ok := spokes.Spoke(cl.ID); ok {
			row.Spoke = &sp
		}
		rows = append(rows, row)
	}
	return rows, reg
}

func (c *Console) clusters(w http.ResponseWriter, r *http.Request) {
	rows, reg := c.clusterRows()
	c.render(w, r, "clusters", struct {
		Clusters     []clusterRow
		SecretErrors []debugdoc.SecretError
		Networks     *model.NetworkGateways
	}{rows, reg.SecretErrors, reg.Networks})
}

// localityCount counts a service's endpoints of one cluster in one locality.
type localityCount struct {
	Locality     model.Locality
	Ready, Total int
}

type clusterService struct {
	Hostname   model.Hostname
	Ports      []model.ServicePort
	Localities []localityCount
	Ready      int
	Total      int
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request) {
	id := model.ClusterID(r.PathValue("id"))
	rows, reg := c.clusterRows()
	i := slices.IndexFunc(rows, func(row clusterRow) bool { return row.ID == id })
	if i < 0 {
		http.Error(w, fmt.Sprintf("no cluster %q is named by a remote secret", id), http.StatusNotFound)
		return
	}
	var svcs []clusterService
	for _, s := range reg.Services {
		cs := clusterService{Hostname: s.Hostname, Ports: s.Ports}
		byLoc := map[model.Locality]*localityCount{}
		for _, e := range s.Endpoints {
			if e.Cluster != id {
				continue
			}
			lc := byLoc[e.Locality]
			if lc == nil {
				lc = &localityCount{Locality: e.Locality}
				byLoc[e.Locality] = lc
			}
			lc.Total++
			cs.Total++
			if e.Ready {
				lc.Ready++
				cs.Ready++
			}
		}
		if cs.Total == 0 {
			continue
		}
		for _, lc := range byLoc {
			cs.Localities = append(cs.Localities, *lc)
		}
		slices.SortFunc(cs.Localities, func(a, b localityCount) int { return strings.Compare(a.Locality.String(), b.Locality.String()) })
		svcs = append(svcs, cs)
	}
	c.render(w, r, "cluster", struct {
		Cluster  clusterRow
		Services []clusterService
	}{rows[i], svcs})
}

type replicaRow struct {
	debugdoc.FederationzMember
	Self    bool
	Suspect bool
	Proxies int
	Owns    []bool // per cluster of the matrix
	Count   int
}

func (c *Console) replicas(w http.ResponseWriter, r *http.Request) {
	fed := c.opts.Sources.Federationz()
	recs := c.opts.Sources.Proxies()
	served := map[string]int{}
	for _, rec := range recs {
		served[rec.Replica]++
	}
	rows := make([]replicaRow, 0, len(fed.Members))
	for _, m := range fed.Members {
		row := replicaRow{FederationzMember: m, Self: m.ID == fed.Self, Suspect: slices.Contains(fed.Suspects, m.ID), Proxies: served[m.ID]}
		for _, cl := range fed.Clusters {
			owns := slices.Contains(cl.Owners, m.ID)
			row.Owns = append(row.Owns, owns)
			if owns {
				row.Count++
			}
		}
		rows = append(rows, row)
	}
	c.render(w, r, "replicas", struct {
		Fed      debugdoc.Federationz
		Replicas []replicaRow
	}{fed, rows})
}

// proxyFilter is the proxies page's query.
type proxyFilter struct {
	Cluster, Namespace, Status, Hub, Q string
	Page                               int
}

func parseProxyFilter(q url.Values) proxyFilter {
	f := proxyFilter{Cluster: q.Get("cluster"), Namespace: q.Get("namespace"), Status: q.Get("status"), Hub: q.Get("hub"), Q: q.Get("q")}
	f.Page, _ = strconv.Atoi(q.Get("page"))
	f.Page = max(f.Page, 1)
	return f
}

func (f proxyFilter) keep(r proxystatus.Record) bool {
	return (f.Cluster == "" || r.Cluster == f.Cluster) &&
		(f.Namespace == "" || namespaceOf(r) == f.Namespace) &&
		(f.Status == "" || string(overallStatus(r)) == f.Status) &&
		(f.Hub == "" || r.Replica == f.Hub) &&
		(f.Q == "" || strings.Contains(r.Proxy, f.Q) || strings.Contains(r.Name, f.Q))
}

// url returns the page's URL with page p.
func (f proxyFilter) url(p int) string {
	q := url.Values{}
	for k, v := range map[string]string{"cluster": f.Cluster, "namespace": f.Namespace, "status": f.Status, "hub": f.Hub, "q": f.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p > 1 {
		q.Set("page", strconv.Itoa(p))
	}
	if len(q) == 0 {
		return "/ui/proxies"
	}
	return "/ui/proxies?" + q.Encode()
}

type proxyRow struct {
	proxystatus.Record
	Overall   proxystatus.Status
	Namespace string
	Statuses  []proxystatus.Status // per table type
	Link      string
}

type proxiesData struct {
	Filter             proxyFilter
	Types              []string
	Rows               []proxyRow
	Matched, Total     int
	Page, Pages        int
	First, Last        int
	Prev, Next         string
	Clusters, Replicas []string
	Namespaces         []string
	Statuses           []proxystatus.Status
}

func (c *Console) proxies(w http.ResponseWriter, r *http.Request) {
	recs := c.opts.Sources.Proxies()
	proxystatus.Sort(recs)
	f := parseProxyFilter(r.URL.Query())
	d := proxiesData{Filter: f, Types: proxystatus.TableTypes(), Total: len(recs), Statuses: statuses}
	clusters, replicas, namespaces := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var matched []proxystatus.Record
	for _, rec := range recs {
		clusters[rec.Cluster], replicas[rec.Replica], namespaces[namespaceOf(rec)] = true, true, true
		if f.keep(rec) {
			matched = append(matched, rec)
		}
	}
	d.Clusters, d.Replicas, d.Namespaces = sortedKeys(clusters), sortedKeys(replicas), sortedKeys(namespaces)
	d.Matched = len(matched)
	size := c.opts.PageSize
	d.Pages = max(1, (len(matched)+size-1)/size)
	d.Page = min(f.Page, d.Pages)
	lo, hi := (d.Page-1)*size, min(d.Page*size, len(matched))
	d.First, d.Last = lo+1, hi
	for _, rec := range matched[lo:hi] {
		row := proxyRow{Record: rec, Overall: overallStatus(rec), Namespace: namespaceOf(rec), Link: proxyLink(rec.Proxy)}
		for _, t := range d.Types {
			row.Statuses = append(row.Statuses, rec.Status(t))
		}
		d.Rows = append(d.Rows, row)
	}
	if d.Page > 1 {
		d.Prev = f.url(d.Page - 1)
	}
	if d.Page < d.Pages {
		d.Next = f.url(d.Page + 1)
	}
	c.render(w, r, "proxies", d)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

type typeRow struct {
	Type string
	proxystatus.TypeStatus
	Status proxystatus.Status
}

func (c *Console) proxy(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	var found []proxystatus.Record
	for _, rec := range c.opts.Sources.Proxies() {
		if rec.Proxy == id || rec.Name == id {
			found = append(found, rec)
		}
	}
	if len(found) == 0 {
		http.Error(w, fmt.Sprintf("no proxy %q is connected to any replica", id), http.StatusNotFound)
		return
	}
	type view struct {
		proxystatus.Record
		Overall proxystatus.Status
		Types   []typeRow
	}
	var views []view
	for _, rec := range found {
		v := view{Record: rec, Overall: overallStatus(rec)}
		for _, t := range proxystatus.DetailTypes(rec) {
			v.Types = append(v.Types, typeRow{Type: strings.ToUpper(t), TypeStatus: rec.Types[t], Status: rec.Status(t)})
		}
		views = append(views, v)
	}
	c.render(w, r, "proxy", struct {
		ID      string
		Records []view
	}{id, views})
}

func (c *Console) trust(w http.ResponseWriter, r *http.Request) {
	type root struct {
		debugdoc.TrustzRoot
		State string
	}
	var roots []root
	for _, rt := range c.opts.Sources.Trustz().Roots {
		state := "active"
		if rt.RetireAt != "" {
			state = "retiring"
		}
		roots = append(roots, root{rt, state})
	}
	c.render(w, r, "trust", struct{ Roots []root }{roots})
}

func (c *Console) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	proxy, host, subset := q.Get("proxy"), q.Get("host"), q.Get("subset")
	d := struct {
		Proxy, Host, Subset string
		Asked               bool
		Result              debugdoc.Explainz
		Proxies             []string
		Hosts               []string
	}{Proxy: proxy, Host: host, Subset: subset, Asked: proxy != "" || host != ""}
	if d.Asked {
		d.Result = c.opts.Sources.Explain(proxy, host, subset)
	}
	// Suggestions for the form, bounded so that the page stays small.
	const maxSuggestions = 500
	for _, rec := range c.opts.Sources.Proxies() {
		if len(d.Proxies) == maxSuggestions {
			break
		}
		d.Proxies = append(d.Proxies, displayName(rec))
	}
	slices.Sort(d.Proxies)
	d.Proxies = slices.Compact(d.Proxies)
	for _, s := range c.opts.Sources.Registryz().Services {
		if len(d.Hosts) == maxSuggestions {
			break
		}
		for _, p := range s.Ports {
			d.Hosts = append(d.Hosts, fmt.Sprintf("%s:%d", s.Hostname, p.Port))
		}
	}
	c.render(w, r, "explain", d)
}

// config shows the configuration objects the replica read, with their
// state, errors, warnings and notes, filtered by kind (?kind=), and the
// kinds whose CRD the config cluster lacks.
func (c *Console) config(w http.ResponseWriter, r *http.Request) {
	var doc debugdoc.Configz
	if c.opts.Sources.Configz != nil {
		doc = c.opts.Sources.Configz()
	}
	kind := r.URL.Query().Get("kind")
	counts := map[string]int{}
	var objs []debugdoc.ConfigzObject
	for _, o := range doc.Objects {
		counts[o.Kind]++
		if kind == "" || o.Kind == kind {
			objs = append(objs, o)
		}
	}
	kinds := make([]count, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		kinds = append(kinds, count{Label: k, ID: "kind-" + strings.ToLower(k), N: counts[k]})
	}
	c.render(w, r, "config", struct {
		Doc     debugdoc.Configz
		Objects []debugdoc.ConfigzObject
		Kinds   []count
		Kind    string
	}{doc, objs, kinds, kind})
}
