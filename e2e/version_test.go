package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// envVersion is the version `make build` stamped (the Makefile hands it
// to the tests).
const envVersion = "MESHFED_VERSION"

// TestVersionStamp: the binaries make builds all carry the version git
// describes, and say it everywhere: --version of meshfed-hub, meshfed-spoke
// and meshfed-agent, meshfedctl version (its own, and every replica's
// through one), meshfed_build_info of the hub and the spoke, each member
// of /debug/federationz, and the serving replica's build in each proxy's
// CSDS record.
func TestVersionStamp(t *testing.T) {
	want, rev := stampedVersion(t)
	t.Logf("stamped version %s, revision %s", want, rev)
	for _, b := range []struct{ name, env string }{
		{"meshfed-hub", framework.EnvHubBinary}, {"meshfed-spoke", framework.EnvSpokeBinary}, {"meshfed-agent", framework.EnvAgentBinary},
	} {
		bin := os.Getenv(b.env)
		if bin == "" {
			t.Fatalf("%s is not set: run `make e2e`, which builds the stamped binaries", b.env)
		}
		out, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v: %s", b.name, err, out)
		}
		if prefix := fmt.Sprintf("%s %s (revision %s, go", b.name, want, rev); !strings.HasPrefix(string(out), prefix) {
			t.Errorf("%s --version says %q, want it to start with %q", b.name, out, prefix)
		}
	}
	out, err := framework.Meshfedctl(t, "version")
	if prefix := fmt.Sprintf("meshfedctl %s (revision %s, go", want, rev); err != nil || !strings.HasPrefix(out, prefix) {
		t.Errorf("meshfedctl version = %q, %v; want it to start with %q", out, err, prefix)
	}

	f, hubs, _, _ := gossipFleet(t, framework.Remotes(1), 1, 2)
	h0, h1 := hubs[0], hubs[1]
	ctx := t.Context()
	buildInfo := fmt.Sprintf(`revision=%q,version=%q} 1`, rev, want)
	for _, h := range []*framework.Hub{h0, h1} {
		m, err := h.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m, "meshfed_build_info{") || !strings.Contains(m, buildInfo) {
			t.Errorf("%s exports no meshfed_build_info with %s", h.ReplicaID(), buildInfo)
		}
	}
	testutil.Eventually(t, converge, poll, func() error {
		fed, err := h1.Federationz(ctx)
		if err != nil {
			return err
		}
		if len(fed.Members) != 2 {
			return fmt.Errorf("%s sees members %+v, want 2", h1.ReplicaID(), fed.Members)
		}
		for _, m := range fed.Members {
			if m.Version != want {
				return fmt.Errorf("%s sees %s at version %q, want %q", h1.ReplicaID(), m.ID, m.Version, want)
			}
		}
		return nil
	})
	out, err = framework.Meshfedctl(t, "version", "--monitoring", strings.TrimPrefix(h0.MonitoringURL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshfedctl version --monitoring %s:\n%s", h0.ReplicaID(), out)
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			rows[f[0]] = f[1]
		}
	}
	for _, h := range []*framework.Hub{h0, h1} {
		if rows[h.ReplicaID()] != want {
			t.Errorf("meshfedctl version gives %s version %q, want %q", h.ReplicaID(), rows[h.ReplicaID()], want)
		}
	}
	if strings.Contains(out, "builds") {
		t.Error("one build reported as a mixed fleet")
	}

	// A proxy on h1, read through h0's CSDS: the serving replica's build.
	r := f.Remotes()[0]
	expectClusters(t, clientIn(t, f, h1, r.ID), 3, r.ID)
	testutil.Eventually(t, converge, poll, func() error {
		versions, err := csdsHubVersions(ctx, h0)
		if err != nil {
			return err
		}
		if len(versions) != 1 || versions[h1.ReplicaID()] != want {
			return fmt.Errorf("CSDS of %s gives hub versions %v, want %s at %s", h0.ReplicaID(), versions, h1.ReplicaID(), want)
		}
		return nil
	})

	// The spoke's metrics.
	c, err := client.New(f.Config().RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	installIstioCRDs(t, f.Config().RESTConfig())
	s := startTestSpoke(t, f, c, nil)
	code, body, err := s.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("spoke /metrics: %d %v", code, err)
	}
	if !strings.Contains(body, buildInfo) {
		t.Errorf("the spoke exports no meshfed_build_info with %s", buildInfo)
	}
}

// stampedVersion returns the version the Makefile stamped, after checking
// it against git: on a tagged history `git describe` itself, before the
// first tag v<VERSION file>-dev.<n>.g<commit>; and the commit.
func stampedVersion(t *testing.T) (version, revision string) {
	t.Helper()
	version = os.Getenv(envVersion)
	if version == "" {
		t.Fatalf("%s is not set: run `make e2e` (it passes the version it stamps)", envVersion)
	}
	root, err := framework.ModuleRoot(t.Context(), ".")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(t.Context(), "git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	revision, err = git("rev-parse", "HEAD")
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v (the test checks the stamp against git)", err)
	}
	if described, err := git("describe", "--tags", "--match", "v[0-9]*", "--dirty"); err == nil {
		if version != described {
			t.Fatalf("stamped %s, but git describe says %s", version, described)
		}
		return version, revision
	}
	base, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	count, _ := git("rev-list", "--count", "HEAD")
	short, _ := git("rev-parse", "--short=12", "HEAD")
	if prefix := fmt.Sprintf("v%s-dev.%s.g%s", strings.TrimSpace(string(base)), count, short); !strings.HasPrefix(version, prefix) {
		t.Fatalf("stamped %s, want %s (no tag yet: VERSION file, commit count, commit)", version, prefix)
	}
	return version, revision
}

// csdsHubVersions maps each serving replica to the hub version its
// proxies' CSDS records name.
func csdsHubVersions(ctx context.Context, h *framework.Hub) (map[string]string, error) {
	configs, err := fetchCSDS(ctx, h)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, config := range configs {
		r, err := csds.Record(config)
		if err != nil {
			return nil, err
		}
		out[r.Replica] = r.HubVersion
	}
	return out, nil
}
