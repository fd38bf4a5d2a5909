package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

const otherHost = model.Hostname("other.demo.svc.cluster.local")

// shortTypes names the shared type URLs in test output.
var shortTypes = map[string]string{
	resourcev3.ListenerType: "lds",
	resourcev3.RouteType:    "rds",
	resourcev3.ClusterType:  "cds",
}

// grpcOnly is the view of echo without its http port.
func grpcOnly(ms *model.MergedService) *model.MergedService {
	out := *ms
	svc := *ms.Service
	svc.Ports = svc.Ports[:1]
	out.Service = &svc
	return &out
}

// other is the view of a second service, otherHost, with one port.
func other() *model.MergedService {
	ms := merged(ep("cluster-2", "10.2.9.1", usEast1a, true))
	svc := *ms.Service
	svc.Hostname, svc.Name = otherHost, "other"
	svc.Ports = svc.Ports[:1]
	ms.Service = &svc
	return ms
}

func upd(h model.Hostname, ms *model.MergedService) ServiceUpdate {
	return ServiceUpdate{Hostname: h, Service: ms}
}

// sortedResources returns the resources of m sorted by name.
func sortedResources(m map[string]types.Resource) []proto.Message {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]proto.Message, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

func nameMessages(names []string) []proto.Message {
	out := make([]proto.Message, len(names))
	for i, n := range names {
		out[i] = wrapperspb.String(n)
	}
	return out
}

// changeSections renders one cache's changes as the sections
// "<step> <cache> upsert" and "<step> <cache> delete", left out when empty.
func changeSections(step, cache string, c Changes) []section {
	var out []section
	if len(c.Upsert) > 0 {
		out = append(out, section{step + " " + cache + " upsert", sortedResources(c.Upsert)})
	}
	if len(c.Delete) > 0 {
		out = append(out, section{step + " " + cache + " delete", nameMessages(c.Delete)})
	}
	return out
}

// planSections renders p in a fixed order: shared types, then groups by
// cluster and region; an empty plan is one empty section "<step> nothing".
func planSections(step string, p Plan) []section {
	if p.Empty() {
		return []section{{name: step + " nothing"}}
	}
	var out []section
	for _, t := range SharedTypes {
		if c, ok := p.Shared[t]; ok {
			out = append(out, changeSections(step, shortTypes[t], c)...)
		}
	}
	groups := make([]ProxyGroup, 0, len(p.Groups))
	for g := range p.Groups {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b ProxyGroup) int { return strings.Compare(a.String(), b.String()) })
	for _, g := range groups {
		out = append(out, changeSections(step, "eds "+g.String(), p.Groups[g])...)
	}
	return out
}

// TestGoldenPlanScenario scripts a planner through a service's life: a
// group added before any service, the service appearing, an unchanged
// view, an endpoint change, a second group, a port leaving and the service
// leaving. The golden file lists each step's plan.
func TestGoldenPlanScenario(t *testing.T) {
	p := NewPlanner(Options{})
	var sections []section
	addGroup := func(step string, g ProxyGroup, services ...*model.MergedService) {
		initial := p.AddGroup(g, services)
		sections = append(sections, section{step + " eds " + g.String() + " initial", sortedResources(initial)})
	}
	plan := func(step string, updates ...ServiceUpdate) {
		sections = append(sections, planSections(step, p.Plan(updates))...)
	}
	addGroup("1 group before any service:", groupEast)
	plan("2 echo appears:", upd(echoHost, fleet(true)))
	plan("3 the same view again:", upd(echoHost, fleet(true)))
	plan("4 cluster-1 unready:", upd(echoHost, fleet(false)))
	addGroup("5 second group:", groupNoZone, fleet(false))
	plan("6 http port leaves:", upd(echoHost, grpcOnly(fleet(false))))
	plan("7 echo leaves:", upd(echoHost, nil))
	checkGolden(t, "plan_scenario", render(t, sections...))
}

// names summarises a plan as "<cache>+" (upserted) and "<cache>-"
// (deleted) → sorted names, caches as in planSections.
func names(p Plan) map[string][]string {
	out := map[string][]string{}
	add := func(cache string, c Changes) {
		for n := range c.Upsert {
			out[cache+"+"] = append(out[cache+"+"], n)
		}
		out[cache+"-"] = append(out[cache+"-"], c.Delete...)
	}
	for t, c := range p.Shared {
		add(shortTypes[t], c)
	}
	for g, c := range p.Groups {
		add("eds "+g.String(), c)
	}
	for k, v := range out {
		if len(v) == 0 {
			delete(out, k)
			continue
		}
		slices.Sort(v)
	}
	return out
}

func TestPlan(t *testing.T) {
	l8080, l9090 := ListenerName(echoHost, 8080), ListenerName(echoHost, 9090)
	c8080, c9090 := ClusterName(echoHost, 8080), ClusterName(echoHost, 9090)
	east, noZone := "eds "+groupEast.String(), "eds "+groupNoZone.String()
	for _, tc := range []struct {
		name  string
		opts  Options
		setup func(p *Planner)
		plan  []ServiceUpdate
		want  map[string][]string
	}{{
		name:  "new service in a group",
		setup: func(p *Planner) { p.AddGroup(groupEast, nil) },
		plan:  []ServiceUpdate{upd(echoHost, fleet(true))},
		want: map[string][]string{
			"lds+": {l8080, l9090}, "rds+": {l8080, l9090}, "cds+": {c8080, c9090}, east + "+": {c8080, c9090},
		},
	}, {
		name: "unchanged view is not rewritten",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
		},
		// A new MergedService (rebuilt assignments) equal to the last.
		plan: []ServiceUpdate{upd(echoHost, fleet(true))},
		want: map[string][]string{},
	}, {
		name: "endpoint change touches only EDS",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.AddGroup(groupNoZone, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
		},
		plan: []ServiceUpdate{upd(echoHost, fleet(false))},
		// cluster-1's endpoints turn unready and leave both groups'
		// assignments; listeners, routes and clusters stay.
		want: map[string][]string{east + "+": {c8080, c9090}, noZone + "+": {c8080, c9090}},
	}, {
		name: "port removed",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.AddGroup(groupNoZone, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
		},
		plan: []ServiceUpdate{upd(echoHost, grpcOnly(fleet(true)))},
		// The 8080 resources are equal to what was written: not rewritten.
		want: map[string][]string{
			"lds-": {l9090}, "rds-": {l9090}, "cds-": {c9090}, east + "-": {c9090}, noZone + "-": {c9090},
		},
	}, {
		name: "service disappears",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true)), upd(otherHost, other())})
		},
		plan: []ServiceUpdate{upd(echoHost, nil)},
		want: map[string][]string{
			"lds-": {l8080, l9090}, "rds-": {l8080, l9090}, "cds-": {c8080, c9090}, east + "-": {c8080, c9090},
		},
	}, {
		name: "gone service deletes nothing twice",
		setup: func(p *Planner) {
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
			p.Plan([]ServiceUpdate{upd(echoHost, nil)})
		},
		plan: []ServiceUpdate{upd(echoHost, nil), upd(otherHost, nil), upd(echoHost, &model.MergedService{})},
		want: map[string][]string{},
	}, {
		name: "service leaves and returns in one plan",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
		},
		plan: []ServiceUpdate{upd(echoHost, nil), upd(echoHost, fleet(true))},
		// Deleted, then rebuilt equal to what was written: nothing changes.
		want: map[string][]string{},
	}, {
		name: "group added after the services",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
			p.AddGroup(groupNoZone, []*model.MergedService{fleet(true)})
		},
		plan: []ServiceUpdate{upd(echoHost, fleet(false))},
		want: map[string][]string{east + "+": {c8080, c9090}, noZone + "+": {c8080, c9090}},
	}, {
		name: "forgotten group is not planned",
		setup: func(p *Planner) {
			p.AddGroup(groupEast, nil)
			p.AddGroup(groupNoZone, nil)
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
			p.ForgetGroup(groupNoZone)
		},
		plan: []ServiceUpdate{upd(echoHost, fleet(false))},
		want: map[string][]string{east + "+": {c8080, c9090}},
	}, {
		name: "secure cluster follows service accounts",
		opts: Options{Security: true},
		setup: func(p *Planner) {
			p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
		},
		plan: []ServiceUpdate{upd(echoHost, secureFleet())},
		want: map[string][]string{"cds+": {c8080, c9090}},
	}, {
		name: "secure cluster unchanged",
		opts: Options{Security: true},
		setup: func(p *Planner) {
			p.Plan([]ServiceUpdate{upd(echoHost, secureFleet())})
		},
		plan: []ServiceUpdate{upd(echoHost, secureFleet())},
		want: map[string][]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlanner(tc.opts)
			if tc.setup != nil {
				tc.setup(p)
			}
			got := names(p.Plan(tc.plan))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("plan:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestPlanOtherServiceUntouched: a plan for one hostname leaves what was
// written for another alone, and a later plan for it diffs against it.
func TestPlanOtherServiceUntouched(t *testing.T) {
	p := NewPlanner(Options{})
	p.AddGroup(groupEast, nil)
	p.Plan([]ServiceUpdate{upd(echoHost, fleet(true)), upd(otherHost, other())})
	got := names(p.Plan([]ServiceUpdate{upd(echoHost, nil)}))
	for cache, ns := range got {
		for _, n := range ns {
			if strings.Contains(n, string(otherHost)) {
				t.Errorf("%s %s: the other service was touched", cache, n)
			}
		}
	}
	if got := p.Plan([]ServiceUpdate{upd(otherHost, other())}); !got.Empty() {
		t.Errorf("unchanged other service rewritten: %v", names(got))
	}
}

// TestPlannerGroups: a group is tracked from AddGroup to ForgetGroup, which
// frees its memoized assignments; added again, it is built afresh from the
// views it is given.
func TestPlannerGroups(t *testing.T) {
	p := NewPlanner(Options{})
	first := p.AddGroup(groupEast, []*model.MergedService{fleet(true)})
	if len(first) != 2 {
		t.Fatalf("initial assignments: %d, want 2", len(first))
	}
	if again := p.AddGroup(groupEast, nil); len(again) != 2 {
		t.Errorf("AddGroup of a tracked group returned %d assignments, want what was written (2)", len(again))
	}
	p.AddGroup(groupNoZone, []*model.MergedService{fleet(true)})
	if got := p.Groups(); !slices.Equal(got, []ProxyGroup{groupNoZone, groupEast}) {
		t.Errorf("Groups() = %v", got)
	}
	if n := p.MemoizedGroups(); n != 2 {
		t.Errorf("MemoizedGroups() = %d, want 2", n)
	}

	p.ForgetGroup(groupEast)
	p.ForgetGroup(groupNoZone)
	if len(p.Groups()) != 0 || p.MemoizedGroups() != 0 {
		t.Fatalf("after ForgetGroup: groups %v, memoized %d", p.Groups(), p.MemoizedGroups())
	}
	if got := p.Plan([]ServiceUpdate{upd(echoHost, fleet(false))}); len(got.Groups) != 0 {
		t.Errorf("forgotten groups planned: %v", names(got))
	}
	if p.MemoizedGroups() != 0 {
		t.Errorf("a plan memoized assignments of forgotten groups")
	}

	// Back: built from the view it is given now, not the one it had.
	back := p.AddGroup(groupEast, []*model.MergedService{fleet(false)})
	want := LoadAssignments(fleet(false), groupEast, nil)
	if len(back) != len(want) {
		t.Fatalf("rebuilt group: %d assignments, want %d", len(back), len(want))
	}
	for _, w := range want {
		if !proto.Equal(back[w.GetClusterName()], w) {
			t.Errorf("rebuilt group's %s differs from its current assignment", w.GetClusterName())
		}
	}
	// fleet(false) lacks cluster-1's endpoints: the group must not come
	// back with the assignments it had.
	if c := ClusterName(echoHost, 8080); proto.Equal(back[c], first[c]) {
		t.Error("rebuilt group came back with its old assignments")
	}
}

// TestPlannerInbound: an inbound listener is built once, under the policy
// of the workload at its address in the asking server's cluster; plans
// never delete it, and RefreshInbound rebuilds it when that policy changes
// (for its address, or for all on a nil address set).
func TestPlannerInbound(t *testing.T) {
	p := NewPlanner(Options{})
	in := xdsnode.InboundListenerPrefix + "10.1.0.1:9000"
	strict := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{&istioconfig.PeerAuthentication{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "PeerAuthentication", Namespace: "demo", Name: "default"}},
		Spec: &securityv1beta1.PeerAuthentication{Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT}},
	}})
	policy := (*istioconfig.Snapshot)(nil)
	var asked []string
	lookup := func(c model.ClusterID, ip netip.Addr) istioconfig.WorkloadSecurity {
		asked = append(asked, string(c)+"/"+ip.String())
		return policy.Workload("demo", model.Labels{})
	}
	got := p.Inbound([]string{in, ListenerName(echoHost, 8080), xdsnode.InboundListenerPrefix + "bogus"}, "c1", lookup)
	if len(got) != 1 || got[in] == nil {
		t.Fatalf("Inbound = %v, want only %s", got, in)
	}
	if !slices.Equal(asked, []string{"c1/10.1.0.1"}) {
		t.Errorf("policy looked up for %v, want the server's cluster and address", asked)
	}
	tls := func(r types.Resource) bool {
		return r.(*listenerv3.Listener).GetFilterChains()[0].GetTransportSocket() != nil
	}
	if tls(got[in]) {
		t.Error("no policy, no Security: the listener requires TLS")
	}
	if again := p.Inbound([]string{in}, "c2", lookup); len(again) != 0 {
		t.Errorf("inbound listener built twice")
	}
	p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
	if got := names(p.Plan([]ServiceUpdate{upd(echoHost, nil)})); slices.Contains(got["lds-"], in) {
		t.Errorf("plan deleted the inbound listener: %v", got)
	}

	policy = strict
	if up := p.RefreshInbound(map[netip.Addr]bool{netip.MustParseAddr("10.9.9.9"): true}, lookup); len(up) != 0 {
		t.Errorf("a refresh of another address rebuilt %v", up)
	}
	up := p.RefreshInbound(nil, lookup)
	if len(up) != 1 || !tls(up[in]) {
		t.Fatalf("refresh under STRICT = %v, want %s requiring TLS", up, in)
	}
	if again := p.RefreshInbound(nil, lookup); len(again) != 0 {
		t.Errorf("a refresh with the same policy rebuilt %v", again)
	}
	if p.InboundCount() != 1 {
		t.Errorf("InboundCount = %d", p.InboundCount())
	}
}

// TestReplace: a whole new set against what was written upserts only what
// differs, deletes what is gone, and records the new set.
func TestReplace(t *testing.T) {
	a, b := wrapperspb.String("a"), wrapperspb.String("b")
	written := map[string]types.Resource{"keep": a, "change": a, "gone": a}
	got := Replace(written, map[string]types.Resource{"keep": proto.Clone(a), "change": b, "new": b})
	if len(got.Upsert) != 2 || got.Upsert["change"] != b || got.Upsert["new"] != b {
		t.Errorf("upserts %v, want change and new", got.Upsert)
	}
	if !slices.Equal(got.Delete, []string{"gone"}) {
		t.Errorf("deletes %v, want [gone]", got.Delete)
	}
	if len(written) != 3 || written["change"] != b || written["gone"] != nil {
		t.Errorf("written after: %v", written)
	}
	if again := Replace(written, map[string]types.Resource{"keep": a, "change": b, "new": b}); !again.Empty() {
		t.Errorf("the same set again: %+v, want no change", again)
	}
}
