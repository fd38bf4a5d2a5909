package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// envChartsDir names the directory `make chart-packages` writes to.
const envChartsDir = "MESHFED_CHARTS_DIR"

// TestPackagedCharts: both charts are packaged with the stamped version
// (chart version without the "v", appVersion the version itself), and a
// packaged chart's default image is the image `make images` tags with that
// version.
func TestPackagedCharts(t *testing.T) {
	dir := os.Getenv(envChartsDir)
	if dir == "" {
		t.Fatalf("%s is not set: run `make e2e`, which packages the charts", envChartsDir)
	}
	want, _ := stampedVersion(t)
	for _, c := range []struct{ chart, namespace, deployment string }{
		{"meshfed-hub", "meshfed", "meshfed-hub"}, {"meshfed-spoke", "istio-system", "meshfed-spoke"},
	} {
		t.Run(c.chart, func(t *testing.T) {
			path := filepath.Join(dir, c.chart+"-"+strings.TrimPrefix(want, "v")+".tgz")
			ch, err := loader.Load(path)
			if err != nil {
				t.Fatalf("loading the packaged chart: %v", err)
			}
			if ch.Metadata.Version != strings.TrimPrefix(want, "v") || ch.Metadata.AppVersion != want {
				t.Errorf("version %q appVersion %q, want %q and %q", ch.Metadata.Version, ch.Metadata.AppVersion, strings.TrimPrefix(want, "v"), want)
			}
			if ch.Schema == nil {
				t.Error("the package lost values.schema.json")
			}
			r := mustRender(t, path, c.namespace, nil)
			var dep appsv1.Deployment
			r.get(t, "Deployment", c.namespace, c.deployment, &dep)
			image := "ghcr.io/meshfed/" + c.chart + ":" + want
			if got := dep.Spec.Template.Spec.Containers[0].Image; got != image {
				t.Errorf("default image %q, want %q", got, image)
			}
			if c.chart == "meshfed-spoke" {
				// The grpc-agent injection template's agent image.
				var cm corev1.ConfigMap
				r.get(t, "ConfigMap", c.namespace, "istio-sidecar-injector", &cm)
				agent := "ghcr.io/meshfed/meshfed-agent:" + want
				if !strings.Contains(cm.Data["values"], agent) {
					t.Errorf("the injection values do not name the agent image %s:\n%s", agent, cm.Data["values"])
				}
			}
		})
	}
}
