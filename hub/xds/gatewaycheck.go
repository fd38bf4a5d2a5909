package xds

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// What only the serving side knows of Istio Gateways, told to the config
// watcher as warnings on the Gateways (GatewayWarnings): a selector that no
// Pod of the registry's clusters has the labels of, and a credential that
// a gateway proxy asked for and that cannot be made from its Secret.

// credentialReports are the credentials that could not be served, by the
// node that asked and the SDS name: the Secret's problem, as
// xdsgen.CredentialSecret or the watch says it (never its data).
type credentialReports struct {
	mu sync.Mutex // guards byNode
	// byNode holds, per node's credentials, SDS name → problem, and
	// the node's cluster and namespace.
	byNode map[*nodeCredentials]map[string]string
}

func (r *credentialReports) set(nc *nodeCredentials, name, problem string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNode == nil {
		r.byNode = map[*nodeCredentials]map[string]string{}
	}
	cur, had := r.byNode[nc][name]
	if problem == "" {
		if !had {
			return false
		}
		delete(r.byNode[nc], name)
		if len(r.byNode[nc]) == 0 {
			delete(r.byNode, nc)
		}
		return true
	}
	if r.byNode[nc] == nil {
		r.byNode[nc] = map[string]string{}
	}
	r.byNode[nc][name] = problem
	return cur != problem
}

// forget drops what node nc reported: its last stream closed.
func (r *credentialReports) forget(nc *nodeCredentials) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, had := r.byNode[nc]
	delete(r.byNode, nc)
	return had
}

// problems returns, by credentialName (the SDS name without
// kubernetes://, nor -cacert), each problem reported, sorted, with where.
func (r *credentialReports) problems() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for nc, byName := range r.byNode {
		for sds, problem := range byName {
			ref, ok := xdsgen.ParseCredentialName(sds)
			if !ok {
				continue
			}
			name := ref.Name
			if ref.Namespace != "" {
				name = ref.Namespace + "/" + name
			}
			p := fmt.Sprintf("in cluster %s, namespace %s: %s", nc.cluster, nc.namespace, problem)
			if !slices.Contains(out[name], p) {
				out[name] = append(out[name], p)
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// GatewayWarningsChanged signals (coalesced) that GatewayWarnings may
// have changed: after a push, or a change of a credential's problem.
func (s *Server) GatewayWarningsChanged() <-chan struct{} { return s.gatewayChecks }

func (s *Server) signalGatewayChecks() {
	select {
	case s.gatewayChecks <- struct{}{}:
	default:
	}
}

// GatewayWarnings returns the warnings this replica finds on the Istio
// Gateways of the configuration last pushed (and the Gateway API's, whose
// listeners' certificates it reports, istioconfig.ListenerProblem): a
// selector no Pod of the
// registry has the labels of (the registry knows the Pods behind the
// Services of its clusters, a gateway's among them), and a credentialName
// whose Secret could not make a credential for a gateway proxy of this
// replica. It costs a pass over the registry's endpoints only when the
// configuration has Istio Gateways.
func (s *Server) GatewayWarnings() map[istioconfig.Key][]string {
	v := s.cache.view.Load()
	problems := s.credentialReports.problems()
	out := map[istioconfig.Key][]string{}
	var gws []*istioconfig.Gateway
	for _, g := range v.cfg.Gateways() {
		if !g.Namespaced {
			gws = append(gws, g)
			continue
		}
		if g.Spec == nil {
			continue
		}
		// A Gateway API Gateway: its listeners' certificates, on it.
		for _, srv := range g.Spec.GetServers() {
			for _, p := range problems[srv.GetTls().GetCredentialName()] {
				out[g.From] = append(out[g.From], istioconfig.ListenerProblem(srv.GetPort().GetName(), p))
			}
		}
	}
	if len(gws) == 0 {
		return out
	}
	pods := xdsgen.IndexPods(s.opts.Registry.Services())
	for _, g := range gws {
		if sel := g.Spec.GetSelector(); len(sel) > 0 && !pods.Any(func(w xdsgen.Workload) bool { return w.Labels.Match(sel) }) {
			out[g.Key] = append(out[g.Key], fmt.Sprintf("spec.selector: no Pod of the registry has the labels %s: no gateway proxy is known to serve this Gateway",
				model.NewLabels(sel)))
		}
		for i, srv := range g.Spec.GetServers() {
			cred := srv.GetTls().GetCredentialName()
			if cred == "" {
				continue
			}
			for _, p := range problems[strings.TrimSuffix(cred, "-cacert")] {
				out[g.Key] = append(out[g.Key], fmt.Sprintf("spec.servers[%d].tls.credentialName: %s", i, p))
			}
		}
	}
	return out
}
