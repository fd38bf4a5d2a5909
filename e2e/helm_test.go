package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
)

// envHelmBin names the helm CLI `make helm` builds from the module proxy.
const envHelmBin = "MESHFED_HELM_BIN"

// helmCLI runs the real helm binary against one apiserver, with config,
// cache and data directories of its own (nothing of the user's home).
type helmCLI struct {
	bin, kubeconfig string
	env             []string
}

func newHelmCLI(t *testing.T, kubeconfig string) *helmCLI {
	t.Helper()
	bin := os.Getenv(envHelmBin)
	if bin == "" {
		t.Fatalf("%s is not set: run `make e2e`, which builds helm (make helm)", envHelmBin)
	}
	home := t.TempDir()
	env := append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+kubeconfig)
	return &helmCLI{bin: bin, kubeconfig: kubeconfig, env: env}
}

// try runs helm with args and returns its standard output; an error carries
// its standard error.
func (h *helmCLI) try(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (h *helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := h.try(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// manifest is what `helm get manifest` says the release holds at revision.
func (h *helmCLI) manifest(t *testing.T, release, namespace string, revision int) *rendered {
	t.Helper()
	out := h.run(t, "get", "manifest", release, "-n", namespace, "--revision", fmt.Sprint(revision))
	r := &rendered{byKey: map[string]*unstructured.Unstructured{}}
	if err := r.add("helm get manifest", out); err != nil {
		t.Fatal(err)
	}
	if len(r.objects) == 0 {
		t.Fatalf("helm get manifest %s (revision %d) lists no objects:\n%s", release, revision, out)
	}
	return r
}

// helmCase is one chart installed the way its README says, and the one
// value an upgrade changes.
type helmCase struct {
	chart, release, namespace string
	// createNamespace: install with --create-namespace (else the test makes
	// the namespace first, as the README's kubectl lines do).
	createNamespace bool
	// set are the README's --set values, as dotted keys.
	set map[string]string
	// upgradeKey=upgradeValue is set by `helm upgrade --reuse-values`;
	// upgraded reads the live objects and fails t unless they show it.
	upgradeKey, upgradeValue string
	upgraded                 func(t *testing.T, c client.Client)
	// before runs before the install: what the README makes by hand.
	before func(t *testing.T, c *framework.Cluster)
}

// TestHelmCLI installs both packaged charts with the real helm CLI (built
// from the module proxy) into real apiservers, as their READMEs say: lint,
// install, the objects `helm get manifest` lists are exactly what the chart
// renders and all are live and owned by the release, an upgrade of one value
// reaches the live object, and after uninstall every object of every
// revision is gone, as are the release's records; the hub chart's CRDs are
// installed into an apiserver without them, and stay after uninstall (Helm
// never deletes crds/, and the chart README says so).
func TestHelmCLI(t *testing.T) {
	chartsDir := os.Getenv(envChartsDir)
	if chartsDir == "" {
		t.Fatalf("%s is not set: run `make e2e`, which packages the charts", envChartsDir)
	}
	version, _ := stampedVersion(t)
	chartVersion := strings.TrimPrefix(version, "v")
	// The hub goes into a remote cluster's apiserver, which has no Istio
	// CRDs (the config cluster's are installed by the framework), so the
	// chart's crds/ are installed by helm itself.
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})

	cases := []struct {
		cluster *framework.Cluster
		helmCase
	}{{
		cluster: f.Remotes()[0].Cluster,
		helmCase: helmCase{
			chart: "meshfed-hub", release: "meshfed-hub", namespace: "meshfed",
			set: map[string]string{
				"image.repository":      "registry.example.com/meshfed/meshfed-hub",
				"gossip.keySecret.name": "hub-gossip",
				"service.type":          "LoadBalancer",
			},
			before: func(t *testing.T, c *framework.Cluster) {
				if err := c.EnsureNamespace(t.Context(), "meshfed"); err != nil {
					t.Fatal(err)
				}
				key := make([]byte, 32)
				for i := range key {
					key[i] = byte(i * 7)
				}
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "meshfed", Name: "hub-gossip"},
					Data: map[string][]byte{"gossip-key": key}}
				if err := c.Client().Create(t.Context(), s); err != nil {
					t.Fatal(err)
				}
			},
			upgradeKey: "replicaCount", upgradeValue: "2",
			upgraded: func(t *testing.T, c client.Client) {
				var d appsv1.Deployment
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: "meshfed", Name: "meshfed-hub"}, &d); err != nil {
					t.Fatal(err)
				}
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
					t.Errorf("after the upgrade the Deployment has %v replicas, want 2", d.Spec.Replicas)
				}
				if got := d.Spec.Template.Spec.Containers[0].Image; got != "registry.example.com/meshfed/meshfed-hub:"+version {
					t.Errorf("--reuse-values lost the image: %s", got)
				}
			},
		},
	}, {
		cluster: f.Config().Cluster,
		helmCase: helmCase{
			chart: "meshfed-spoke", release: "meshfed-spoke", namespace: "istio-system", createNamespace: true,
			set: map[string]string{
				"image.repository":           "registry.example.com/meshfed/meshfed-spoke",
				"injection.agent.repository": "registry.example.com/meshfed/meshfed-agent",
				"clusterID":                  "cluster-1",
				"network":                    "network-1",
				"hub.discoveryAddress":       "hub.example.com:15012",
				// A gateway, as Istio's gateway chart deploys one.
				"gateways[0].name":                  "istio-ingressgateway",
				"gateways[0].labels.istio":          "ingressgateway",
				"gateways[0].service.ports[0].name": "http2",
				"gateways[0].service.ports[0].port": "80",
				"gateways[0].service.ports[1].name": "https",
				"gateways[0].service.ports[1].port": "443",
				"gateways[0].service.type":          "ClusterIP",
				// The network's east-west gateway.
				"eastwest.enabled":      "true",
				"eastwest.service.type": "ClusterIP",
			},
			upgradeKey: "clusterID", upgradeValue: "cluster-7",
			upgraded: func(t *testing.T, c client.Client) {
				var d appsv1.Deployment
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: "istio-system", Name: "meshfed-spoke"}, &d); err != nil {
					t.Fatal(err)
				}
				args := d.Spec.Template.Spec.Containers[0].Args
				if !slices.Contains(args, "--cluster-id=cluster-7") || slices.Contains(args, "--cluster-id=cluster-1") {
					t.Errorf("after the upgrade the spoke's args are %q, want --cluster-id=cluster-7", args)
				}
				// The injection templates' values carry both: the new
				// cluster ID, and the network --reuse-values kept.
				var cm corev1.ConfigMap
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: "istio-system", Name: "istio-sidecar-injector"}, &cm); err != nil {
					t.Fatal(err)
				}
				var values map[string]any
				if err := yamlUnmarshal(cm.Data["values"], &values); err != nil {
					t.Fatalf("injector values: %v", err)
				}
				if values["clusterID"] != "cluster-7" || values["network"] != "network-1" {
					t.Errorf("after the upgrade the injector values say clusterID %v, network %v; want cluster-7 and network-1", values["clusterID"], values["network"])
				}
			},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.chart, func(t *testing.T) {
			pkg := filepath.Join(chartsDir, tc.chart+"-"+chartVersion+".tgz")
			testHelmRelease(t, newHelmCLI(t, tc.cluster.KubeconfigFile()), tc.cluster, pkg, tc.helmCase)
		})
	}
}

func testHelmRelease(t *testing.T, h *helmCLI, cluster *framework.Cluster, pkg string, tc helmCase) {
	c := cluster.Client()
	ctx := t.Context()

	// helm lint --strict fails on warnings; INFO lines (no icon) may stay.
	lint := h.run(t, "lint", "--strict", pkg)
	for line := range strings.Lines(lint) {
		if strings.HasPrefix(line, "[WARNING]") || strings.HasPrefix(line, "[ERROR]") {
			t.Errorf("helm lint: %s", line)
		}
	}

	if tc.before != nil {
		tc.before(t, cluster)
	}
	install := []string{"install", tc.release, pkg, "-n", tc.namespace}
	if tc.createNamespace {
		install = append(install, "--create-namespace")
	}
	for _, k := range slices.Sorted(maps.Keys(tc.set)) {
		install = append(install, "--set", k+"="+tc.set[k])
	}
	h.run(t, install...)

	// What helm installed is what the chart renders with these values
	// (the library the chart tests use), object for object.
	rev1 := h.manifest(t, tc.release, tc.namespace, 1)
	want := mustRender(t, pkg, tc.namespace, nestValues(tc.set))
	if got, w := rev1.keys(), want.keys(); !slices.Equal(got, w) {
		t.Errorf("helm installed %d objects, the chart renders %d:\nhelm:  %v\nchart: %v", len(got), len(w), got, w)
	}
	for _, u := range rev1.objects {
		live := getLive(t, c, u)
		if live == nil {
			t.Errorf("%s is in the release but not in the apiserver", objKey(u))
			continue
		}
		if got := live.GetAnnotations()["meta.helm.sh/release-name"]; got != tc.release {
			t.Errorf("%s: release-name annotation %q, want %q", objKey(u), got, tc.release)
		}
		if got := live.GetLabels()["app.kubernetes.io/managed-by"]; got != "Helm" {
			t.Errorf("%s: managed-by %q, want Helm", objKey(u), got)
		}
	}
	t.Logf("%s: installed %d objects", tc.release, len(rev1.objects))

	crds := chartCRDs(t, pkg)
	for _, u := range crds {
		if getLive(t, c, u) == nil {
			t.Errorf("CRD %s of crds/ was not installed", u.GetName())
		}
	}

	// Upgrade one value, keeping the others.
	h.run(t, "upgrade", tc.release, pkg, "-n", tc.namespace, "--reuse-values", "--set", tc.upgradeKey+"="+tc.upgradeValue)
	tc.upgraded(t, c)
	var history []struct {
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(h.run(t, "history", tc.release, "-n", tc.namespace, "-o", "json")), &history); err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0].Status != "superseded" || history[1].Status != "deployed" || history[1].Revision != 2 {
		t.Errorf("helm history after one upgrade: %+v, want revision 1 superseded and 2 deployed", history)
	}
	var values map[string]any
	if err := json.Unmarshal([]byte(h.run(t, "get", "values", tc.release, "-n", tc.namespace, "-o", "json")), &values); err != nil {
		t.Fatal(err)
	}
	for k, v := range maps.All(tc.set) {
		if tc.upgradeKey == k {
			v = tc.upgradeValue
		}
		if got := dotted(values, k); got != v {
			t.Errorf("helm get values: %s=%v after --reuse-values, want %s", k, got, v)
		}
	}
	if got := dotted(values, tc.upgradeKey); got != tc.upgradeValue {
		t.Errorf("helm get values: %s=%v after the upgrade, want %s", tc.upgradeKey, got, tc.upgradeValue)
	}

	// Uninstall: every object of either revision is gone, and so are the
	// release records (Helm keeps them in Secrets owner=helm).
	all := h.manifest(t, tc.release, tc.namespace, 2)
	for _, u := range rev1.objects {
		if !all.has(u.GetKind(), u.GetNamespace(), u.GetName()) {
			all.byKey[objKey(u)] = u
			all.objects = append(all.objects, u)
		}
	}
	h.run(t, "uninstall", tc.release, "-n", tc.namespace, "--wait", "--timeout", "60s")
	for _, u := range all.objects {
		if live := getLive(t, c, u); live != nil {
			t.Errorf("%s is still in the apiserver after helm uninstall (deletionTimestamp %v, finalizers %v)",
				objKey(u), live.GetDeletionTimestamp(), live.GetFinalizers())
		}
	}
	var records corev1.SecretList
	if err := c.List(ctx, &records, client.InNamespace(tc.namespace), client.MatchingLabels{"owner": "helm", "name": tc.release}); err != nil {
		t.Fatal(err)
	}
	if n := len(records.Items); n != 0 {
		t.Errorf("%d release records left in Secrets after uninstall", n)
	}
	if out := h.run(t, "list", "-n", tc.namespace, "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("helm list after uninstall: %q", out)
	}
	for _, u := range crds {
		if getLive(t, c, u) == nil {
			t.Errorf("CRD %s was deleted by helm uninstall; Helm keeps crds/ and the chart README promises it", u.GetName())
		}
	}
	t.Logf("%s: upgraded (%s=%s) and uninstalled; %d objects checked gone, %d CRDs kept", tc.release, tc.upgradeKey, tc.upgradeValue, len(all.objects), len(crds))
}

// chartCRDs decodes the chart's crds/ files.
func chartCRDs(t *testing.T, pkg string) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(pkg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{byKey: map[string]*unstructured.Unstructured{}}
	for _, f := range ch.CRDObjects() {
		if err := r.add(f.Filename, string(f.File.Data)); err != nil {
			t.Fatal(err)
		}
	}
	return r.objects
}

// getLive reads u's object from the apiserver: nil when it is not there.
func getLive(t *testing.T, c client.Client, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(schema.FromAPIVersionAndKind(u.GetAPIVersion(), u.GetKind()))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := c.Get(ctx, client.ObjectKeyFromObject(u), live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s: %v", objKey(u), err)
	}
	return live
}

func objKey(u *unstructured.Unstructured) string {
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// nestValues turns --set style dotted keys into the nested values they set.
func nestValues(set map[string]string) map[string]any {
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		// What --set does: typed values, list indexes.
		if err := strvals.ParseInto(k+"="+set[k], out); err != nil {
			panic(fmt.Sprintf("--set %s=%s: %v", k, set[k], err))
		}
	}
	return out
}

// dotted reads the dotted key k of nested values (list items as
// name[i]), as a string.
func dotted(values map[string]any, k string) string {
	var cur any = values
	for p := range strings.SplitSeq(k, ".") {
		key, index, listed := strings.Cut(strings.TrimSuffix(p, "]"), "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[key]
		if listed {
			l, _ := cur.([]any)
			i, err := strconv.Atoi(index)
			if err != nil || i >= len(l) {
				return ""
			}
			cur = l[i]
		}
	}
	if cur == nil {
		return ""
	}
	return fmt.Sprint(cur)
}

// TestHelmPinMatchesGoMod: the helm CLI `make helm` builds is the version
// of the Helm library the chart tests render with, so a chart that renders
// in the tests renders the same for the CLI.
func TestHelmPinMatchesGoMod(t *testing.T) {
	script, err := os.ReadFile("helmassets/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var pinned, library string
	for line := range strings.Lines(string(script)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version="); ok {
			pinned = v
			break
		}
	}
	for line := range strings.Lines(string(gomod)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "helm.sh/helm/v3" {
			library = f[1]
		}
	}
	if pinned == "" || library == "" {
		t.Fatalf("no version found: helmassets/build.sh pins %q, go.mod requires helm.sh/helm/v3 %q", pinned, library)
	}
	if pinned != library {
		t.Errorf("make helm builds helm %s, but the chart tests render with helm.sh/helm/v3 %s: bump e2e/helmassets/build.sh", pinned, library)
	}
}
