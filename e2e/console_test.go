package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// TestFleetConsole drives the fleet console of two replicas over three
// remote clusters in a real headless Chromium: the overview's counts are
// /debug/registryz's and the CSDS answer's, through either replica; a
// NACKing proxy shows ERROR with its message; the Explain view of a client
// in cluster-1 lists cluster-1's endpoints first; and after a SIGKILL of a
// replica the open pages, never reloaded, show it gone and its clusters
// moved. Every view is saved as a PNG under the test's artifact directory
// (go test -artifacts; make e2e keeps them in bin/e2e-artifacts).
func TestFleetConsole(t *testing.T) {
	browser := framework.StartTestBrowser(t)
	f, hubs, _, _ := gossipFleet(t, threeRegionsN(3), 2, 2)
	h0, h1 := hubs[0], hubs[1]
	ctx := t.Context()
	// A proxyless client in each cluster, alternating between the replicas.
	for i, r := range f.Remotes() {
		expectClusters(t, clientIn(t, f, hubs[i%2], r.ID), 10, r.ID)
	}
	shots := newScreenshots(t)

	t.Run("the overview's counts are registryz's and CSDS's, through either replica", func(t *testing.T) {
		for _, h := range hubs {
			tab := openConsole(t, browser, h.MonitoringURL()+"/")
			testutil.Eventually(t, converge, poll, func() error { return overviewMatches(ctx, tab, h, len(hubs)) })
			if err := expectText(ctx, tab, "#answered-by", h.ReplicaID()); err != nil {
				t.Error(err)
			}
			shots.take(t, tab, "overview-"+h.ReplicaID())
		}
	})

	t.Run("a NACKing proxy shows ERROR with its message", func(t *testing.T) {
		node := &corev3.Node{
			Id:       xdsnode.SidecarID("10.250.0.9", "nacker", "demo", model.DefaultDomainSuffix),
			Metadata: xdsnode.Metadata{ClusterID: "cluster-2"}.Struct(),
		}
		w := authenticatedWatcher(t, h1, f.Remote("cluster-2"), "nacker", node)
		if err := w.WatchEDS(xdsgen.ClusterName(echoHost, 8080)); err != nil {
			t.Fatal(err)
		}
		<-w.Updates() // the first response is ACKed
		const why = "meshfed-e2e: endpoint rejected on purpose"
		w.RejectAll(why)
		wl := f.Remote("cluster-2").Workloads()[0]
		if err := wl.SetReady(ctx, false); err != nil { // a new response, NACKed
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wl.SetReady(context.WithoutCancel(ctx), true) })

		// The replica that does not serve it lists it, filtered by status.
		tab := openConsole(t, browser, h0.MonitoringURL()+"/ui/proxies?status=ERROR")
		row := fmt.Sprintf("#proxies tr[data-proxy=%q]", node.GetId())
		testutil.Eventually(t, converge, poll, func() error {
			ids, err := tab.Attrs(ctx, "#proxies tbody tr", "data-proxy")
			if err != nil {
				return err
			}
			if !slices.Equal(ids, []string{node.GetId()}) {
				return fmt.Errorf("proxies with status ERROR: %v, want only %s", ids, node.GetId())
			}
			return expectContains(ctx, tab, row, "ERROR", "nacker", "cluster-2", h1.ReplicaID())
		})
		shots.take(t, tab, "proxies-error")

		if err := tab.Navigate(ctx, h0.MonitoringURL()+"/ui/proxy?id="+node.GetId()); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, converge, poll, func() error {
			if err := expectText(ctx, tab, "#proxy-status", "ERROR"); err != nil {
				return err
			}
			nacks, err := tab.Texts(ctx, "td.nack")
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(nacks, func(s string) bool { return strings.Contains(s, why) }) {
				return fmt.Errorf("NACK cells %q lack %q", nacks, why)
			}
			return nil
		})
		shots.take(t, tab, "proxy-nack")
	})

	t.Run("Explain of a client in cluster-1 lists cluster-1's endpoints first", func(t *testing.T) {
		// Asked of h1, which does not serve that client (h0 does).
		tab := openConsole(t, browser, h1.MonitoringURL()+"/ui/explain?proxy=client-cluster-1.demo&host=echo.demo:8080")
		testutil.Eventually(t, converge, poll, func() error {
			clusters, err := tab.Attrs(ctx, "#explain tbody tr", "data-cluster")
			if err != nil {
				return err
			}
			sent, err := tab.Attrs(ctx, "#explain tbody tr", "data-sent")
			if err != nil {
				return err
			}
			if len(clusters) != 6 || !slices.Equal(clusters[:2], []string{"cluster-1", "cluster-1"}) ||
				slices.Contains(clusters[2:], "cluster-1") || slices.Contains(sent, "false") {
				return fmt.Errorf("rows by cluster %v (sent %v), want cluster-1's two first, then cluster-2's and cluster-3's, all sent", clusters, sent)
			}
			prio, err := tab.Text(ctx, "#explain tbody tr:first-child td:first-child")
			if err != nil {
				return err
			}
			if prio != "0" {
				return fmt.Errorf("first row's priority is %q, want 0", prio)
			}
			return expectContains(ctx, tab, "#explain tbody tr:first-child", "own cluster")
		})
		shots.take(t, tab, "explain")
	})

	// The remaining views, for the record (their content is checked above
	// and by the golden tests of hub/console).
	for _, v := range []struct{ name, path string }{
		{"clusters", "/ui/clusters"}, {"cluster", "/ui/clusters/cluster-1"},
		{"replicas", "/ui/replicas"}, {"proxies", "/ui/proxies"}, {"trust", "/ui/trust"},
		{"config", "/ui/config"},
	} {
		tab := openConsole(t, browser, h0.MonitoringURL()+v.path)
		shots.take(t, tab, v.name)
	}

	t.Run("after a SIGKILL the open pages show the replica gone and its clusters moved", func(t *testing.T) {
		fed, err := h0.Federationz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The victim is a replica that watches some cluster.
		victim, survivor := h1, h0
		if owned := ownedBy(fed.Clusters, h1.ReplicaID()); len(owned) == 0 {
			victim, survivor = h0, h1
		}
		moved := ownedBy(fed.Clusters, victim.ReplicaID())
		if len(moved) == 0 {
			t.Fatalf("neither replica watches a cluster: %+v", fed.Clusters)
		}
		replicas := openConsole(t, browser, survivor.MonitoringURL()+"/ui/replicas")
		clusters := openConsole(t, browser, survivor.MonitoringURL()+"/ui/clusters")
		overview := openConsole(t, browser, survivor.MonitoringURL()+"/")
		dead := openConsole(t, browser, victim.MonitoringURL()+"/")
		for _, tab := range []*framework.Tab{replicas, clusters, overview, dead} {
			if err := markPage(ctx, tab); err != nil {
				t.Fatal(err)
			}
		}
		if err := expectText(ctx, overview, "#count-replicas", "2"); err != nil {
			t.Fatal(err)
		}
		t.Logf("killing %s, which watches %v", victim.ReplicaID(), moved)
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		testutil.Eventually(t, converge, poll, func() error {
			ids, err := replicas.Attrs(ctx, "#replicas tbody tr", "data-replica")
			if err != nil {
				return err
			}
			if !slices.Equal(ids, []string{survivor.ReplicaID()}) {
				return fmt.Errorf("replicas page lists %v, want only %s", ids, survivor.ReplicaID())
			}
			for _, id := range moved {
				sel := fmt.Sprintf("#clusters tr[data-cluster=%q] td.owners", id)
				if err := expectText(ctx, clusters, sel, survivor.ReplicaID()); err != nil {
					return err
				}
			}
			if err := expectText(ctx, overview, "#count-replicas", "1"); err != nil {
				return err
			}
			return expectAttr(ctx, dead, "#live", "data-state", "down")
		})
		t.Logf("pages updated %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
		for _, tab := range []*framework.Tab{replicas, clusters, overview, dead} {
			if err := samePage(ctx, tab); err != nil {
				t.Error(err)
			}
		}
		if err := expectAttr(ctx, replicas, "#live", "data-state", "live"); err != nil {
			t.Error(err)
		}
		shots.take(t, replicas, "replicas-after-kill")
		shots.take(t, clusters, "clusters-after-kill")
		shots.take(t, dead, "killed-replica")
	})
}

// overviewMatches compares the overview page on tab with h's registryz and
// CSDS answer, read just before.
func overviewMatches(ctx context.Context, tab *framework.Tab, h *framework.Hub, replicas int) error {
	reg, err := h.Registryz(ctx)
	if err != nil {
		return err
	}
	endpoints := 0
	byState := map[debugdoc.ClusterState]int{}
	for _, c := range reg.Clusters {
		endpoints += c.Endpoints
		byState[c.State]++
	}
	proxies, err := csdsCount(ctx, h)
	if err != nil {
		return err
	}
	want := map[string]int{
		"#count-clusters":  len(reg.Clusters),
		"#count-services":  len(reg.Services),
		"#count-endpoints": endpoints,
		"#count-replicas":  replicas,
		"#count-proxies":   proxies,
		"#proxies-SYNCED":  proxies,
	}
	// Every cluster is served, by this replica's watch or another's.
	if n := byState[debugdoc.ClusterSynced] + byState[debugdoc.ClusterReplicated]; n != len(reg.Clusters) {
		return fmt.Errorf("registryz of %s: clusters by state %v, want all synced or replicated", h.ReplicaID(), byState)
	}
	for state, n := range byState {
		want["#clusters-"+string(state)] = n
	}
	got := map[string]int{}
	for sel := range want {
		s, err := tab.Text(ctx, sel)
		if err != nil {
			return err
		}
		if got[sel], err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("%s is %q, not a number", sel, s)
		}
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("overview of %s shows %v, want %v (registryz and CSDS)", h.ReplicaID(), got, want)
	}
	return nil
}

// csdsCount is the number of proxies h's CSDS answer lists.
func csdsCount(ctx context.Context, h *framework.Hub) (int, error) {
	configs, err := fetchCSDS(ctx, h)
	return len(configs), err
}

// fetchCSDS asks h's authenticated xDS port for every proxy's client
// status, as an operator with a token of the config cluster.
func fetchCSDS(ctx context.Context, h *framework.Hub) ([]*statusv3.ClientConfig, error) {
	cc, err := h.OperatorConn(ctx)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	if err != nil {
		return nil, fmt.Errorf("CSDS of %s: %w", h.ReplicaID(), err)
	}
	return resp.GetConfig(), nil
}

// ownedBy lists the clusters replica watches.
func ownedBy(clusters []debugdoc.FederationzCluster, replica string) []string {
	var out []string
	for _, c := range clusters {
		if slices.Contains(c.Owners, replica) {
			out = append(out, string(c.ID))
		}
	}
	return out
}

// openConsole opens url in a new tab and waits for the console's script to
// have started (the live status line).
func openConsole(t *testing.T, b *framework.Browser, url string) *framework.Tab {
	t.Helper()
	tab := framework.NewTestTab(t, b)
	if err := tab.Navigate(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Text(t.Context(), "#live"); err != nil {
		t.Fatalf("%s is no console page: %v", url, err)
	}
	return tab
}

// markPage leaves a value in the page's JavaScript globals; samePage finds
// it again only if the page was never reloaded or left.
func markPage(ctx context.Context, tab *framework.Tab) error {
	var ok bool
	return tab.Eval(ctx, `(window.meshfedE2EMark = "not reloaded", true)`, &ok)
}

func samePage(ctx context.Context, tab *framework.Tab) error {
	var mark *string
	if err := tab.Eval(ctx, `window.meshfedE2EMark || null`, &mark); err != nil {
		return err
	}
	if mark == nil {
		return fmt.Errorf("the page was reloaded: its JavaScript state is gone")
	}
	return nil
}

func expectText(ctx context.Context, tab *framework.Tab, sel, want string) error {
	got, err := tab.Text(ctx, sel)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s reads %q, want %q", sel, got, want)
	}
	return nil
}

func expectContains(ctx context.Context, tab *framework.Tab, sel string, want ...string) error {
	got, err := tab.Text(ctx, sel)
	if err != nil {
		return err
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			return fmt.Errorf("%s reads %q, which lacks %q", sel, got, w)
		}
	}
	return nil
}

func expectAttr(ctx context.Context, tab *framework.Tab, sel, attr, want string) error {
	got, err := tab.Attrs(ctx, sel, attr)
	if err != nil {
		return err
	}
	if len(got) == 0 || got[0] != want {
		return fmt.Errorf("%s's %s is %q, want %q", sel, attr, got, want)
	}
	return nil
}

// screenshots saves PNGs of console views under the test's artifact
// directory, numbered in the order they are taken.
type screenshots struct {
	dir string
	n   int
}

func newScreenshots(t *testing.T) *screenshots {
	return &screenshots{dir: t.ArtifactDir()}
}

func (s *screenshots) take(t *testing.T, tab *framework.Tab, name string) {
	t.Helper()
	s.n++
	path := filepath.Join(s.dir, fmt.Sprintf("%02d-%s.png", s.n, name))
	if err := tab.Screenshot(t.Context(), path); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot %s", path)
}
