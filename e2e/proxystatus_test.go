package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// proxyJSON is the documented shape of `meshfedctl proxy-status -o json`.
type proxyJSON struct {
	Proxies []struct {
		Proxy    string `json:"proxy"`
		Name     string `json:"name"`
		Cluster  string `json:"cluster"`
		Replica  string `json:"replica"`
		Identity string `json:"identity"`
		Types    map[string]struct {
			Status string `json:"status"`
			Nack   string `json:"nack"`
		} `json:"types"`
	} `json:"proxies"`
}

// TestFleetProxyStatus: clients connected to three replicas are all listed,
// with their cluster and replica, by meshfedctl against any one replica; a
// NACKing proxy shows ERROR with its message; a dead replica's proxies
// leave the list.
func TestFleetProxyStatus(t *testing.T) {
	f, hubs, _, _ := gossipFleet(t, threeRegionsN(3), 1, 3)
	h0, h1, h2 := hubs[0], hubs[1], hubs[2]
	ctx := t.Context()

	// One proxyless gRPC client per replica, each in its own cluster.
	want := map[string][2]string{} // name -> cluster, replica
	for i, h := range hubs {
		id := f.Remotes()[i].ID
		conn := clientIn(t, f, h, id)
		expectClusters(t, conn, 10, id)
		want["client-"+string(id)+".demo"] = [2]string{string(id), h.ReplicaID()}
	}

	listed := func(via *framework.Hub) (proxyJSON, error) {
		out, err := hubCtl(t, via, "proxy-status", "-o", "json")
		if err != nil {
			return proxyJSON{}, err
		}
		var doc proxyJSON
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return proxyJSON{}, fmt.Errorf("decoding %q: %w", out, err)
		}
		return doc, nil
	}
	testutil.Eventually(t, converge, poll, func() error {
		doc, err := listed(h2)
		if err != nil {
			return err
		}
		got := map[string][2]string{}
		for _, p := range doc.Proxies {
			got[p.Name] = [2]string{p.Cluster, p.Replica}
			for _, typ := range []string{"cds", "lds", "rds", "eds"} {
				if st := p.Types[typ].Status; st != "SYNCED" {
					return fmt.Errorf("%s %s is %q", p.Name, typ, st)
				}
			}
		}
		for name, w := range want {
			if got[name] != w {
				return fmt.Errorf("%s: got %v, want cluster/replica %v (all: %v)", name, got[name], w, got)
			}
		}
		return nil
	})
	table, err := hubCtl(t, h1, "proxy-status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshfedctl proxy-status via %s:\n%s", h1.ReplicaID(), table)
	if !strings.HasPrefix(table, "NAME") || !strings.Contains(table, "HUB") {
		t.Fatalf("table has no istioctl-style header:\n%s", table)
	}

	t.Run("a NACK shows as ERROR with its message", func(t *testing.T) {
		node := &corev3.Node{
			Id:       xdsnode.SidecarID("10.250.0.9", "nacker", "demo", model.DefaultDomainSuffix),
			Metadata: xdsnode.Metadata{ClusterID: "cluster-2"}.Struct(),
		}
		w := authenticatedWatcher(t, h1, f.Remote("cluster-2"), "nacker", node)
		name := xdsgen.ClusterName(echoHost, 8080)
		if err := w.WatchEDS(name); err != nil {
			t.Fatal(err)
		}
		<-w.Updates() // the first response is ACKed
		const why = "meshfed-e2e: endpoint rejected on purpose"
		w.RejectAll(why)
		// Change the endpoints so a new response is sent, and NACKed.
		wl := f.Remote("cluster-2").Workloads()[0]
		if err := wl.SetReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, converge, poll, func() error {
			out, err := hubCtl(t, h0, "proxy-status", "nacker.demo")
			if err != nil {
				return err
			}
			if !strings.Contains(out, "ERROR") || !strings.Contains(out, why) {
				return fmt.Errorf("detail lacks ERROR with the NACK message:\n%s", out)
			}
			return nil
		})
		if err := wl.SetReady(ctx, true); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a dead replica's proxies leave the list", func(t *testing.T) {
		gone := "client-" + string(f.Remotes()[2].ID) + ".demo"
		if err := h2.Kill(); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, converge, poll, func() error {
			doc, err := listed(h0)
			if err != nil {
				return err
			}
			for _, p := range doc.Proxies {
				if p.Name == gone && p.Replica == h2.ReplicaID() {
					return fmt.Errorf("%s still listed under dead replica %s", gone, h2.ReplicaID())
				}
			}
			return nil
		})
	})
}

// hubCtl runs meshfedctl's command args[0] with args[1:] against hub's
// authenticated xDS port, as an operator with a token of the config
// cluster (Hub.CtlArgs).
func hubCtl(t *testing.T, hub *framework.Hub, args ...string) (string, error) {
	t.Helper()
	creds, err := hub.CtlArgs(t.Context())
	if err != nil {
		return "", err
	}
	return framework.Meshfedctl(t, slices.Concat(args[:1], creds, args[1:])...)
}

// authenticatedWatcher opens an ADS watcher as node (of namespace demo) on
// hub's authenticated port, with the certificate of service account
// demo/sa of c that a cert agent keeps.
func authenticatedWatcher(t *testing.T, hub *framework.Hub, c *framework.RemoteCluster, sa string, node *corev3.Node) *framework.ADSWatcher {
	t.Helper()
	dial := framework.AuthenticatedDial(t, framework.StartTestCertAgent(t, c, hub, "demo", sa))
	return framework.NewTestADSWatcher(t, hub.CAAddr(), node, dial)
}
