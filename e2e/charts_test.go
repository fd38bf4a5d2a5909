package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/spoke/inject"
)

// The charts, relative to this package.
const (
	spokeChartDir = "../remote-charts/spoke"
	hubChartDir   = "../remote-charts/hub"
)

// chartKubeVersion is the Kubernetes the charts are rendered for: the one
// the tests run (make k8s-assets).
var chartKubeVersion = &chartutil.KubeVersion{Version: "v1.36.3", Major: "1", Minor: "36"}

// rendered is one rendering of a chart: its objects, by "Kind/namespace/name".
type rendered struct {
	objects []*unstructured.Unstructured
	byKey   map[string]*unstructured.Unstructured
}

// renderChart renders the chart in dir as `helm template` would (real Helm
// library: values coalesced with the chart's defaults and checked against
// values.schema.json, then the template engine), as release "meshfed" in
// namespace.
func renderChart(dir, namespace string, values map[string]any) (*rendered, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	if !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, chartKubeVersion.Version) {
		return nil, fmt.Errorf("chart %s needs Kubernetes %s, not %s", chrt.Name(), chrt.Metadata.KubeVersion, chartKubeVersion.Version)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *chartKubeVersion
	vals, err := chartutil.ToRenderValues(chrt, values,
		chartutil.ReleaseOptions{Name: "meshfed", Namespace: namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		return nil, err
	}
	out := &rendered{byKey: map[string]*unstructured.Unstructured{}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		if err := out.add(name, files[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// add decodes the YAML stream text (from source, for errors) and adds its
// objects; empty documents are skipped, an object twice is an error.
func (r *rendered) add(source, text string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if r.byKey[key] != nil {
			return fmt.Errorf("%s: %s rendered twice", source, key)
		}
		r.byKey[key] = u
		r.objects = append(r.objects, u)
	}
}

func mustRender(t *testing.T, dir, namespace string, values map[string]any) *rendered {
	t.Helper()
	r, err := renderChart(dir, namespace, values)
	if err != nil {
		t.Fatalf("rendering %s: %v", dir, err)
	}
	return r
}

// get decodes the object kind/namespace/name into out (a typed object).
func (r *rendered) get(t *testing.T, kind, namespace, name string, out runtime.Object) {
	t.Helper()
	u := r.byKey[kind+"/"+namespace+"/"+name]
	if u == nil {
		t.Fatalf("no %s %s/%s rendered; have %v", kind, namespace, name, r.keys())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

func (r *rendered) has(kind, namespace, name string) bool {
	return r.byKey[kind+"/"+namespace+"/"+name] != nil
}

func (r *rendered) keys() []string {
	var ks []string
	for k := range r.byKey {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ruleSet flattens RBAC rules into "group resource verb [name]" strings,
// so a comparison fails on any widening: a new verb, resource, group or a
// dropped resourceNames restriction.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if len(r.ResourceNames) == 0 {
						out = append(out, fmt.Sprintf("%q %s %s", g, res, v))
					}
					for _, n := range r.ResourceNames {
						out = append(out, fmt.Sprintf("%q %s %s %s", g, res, v, n))
					}
				}
			}
		}
		if len(r.NonResourceURLs) > 0 {
			out = append(out, fmt.Sprintf("nonResourceURLs %v %v", r.NonResourceURLs, r.Verbs))
		}
	}
	sort.Strings(out)
	return out
}

func requireRules(t *testing.T, what string, got []rbacv1.PolicyRule, want ...string) {
	t.Helper()
	sort.Strings(want)
	if g := ruleSet(got); !slices.Equal(g, want) {
		t.Errorf("%s rules:\n  got  %q\n  want %q", what, g, want)
	}
}

// noWildcards fails on a "*" anywhere in any role of r.
func noWildcards(t *testing.T, r *rendered) {
	t.Helper()
	for _, u := range r.objects {
		if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			for _, s := range slices.Concat(rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames) {
				if strings.Contains(s, "*") {
					t.Errorf("%s %s has a wildcard rule: %+v", u.GetKind(), u.GetName(), rule)
				}
			}
		}
		if role.AggregationRule != nil {
			t.Errorf("%s %s aggregates other roles", u.GetKind(), u.GetName())
		}
	}
}

func TestChartsLint(t *testing.T) {
	for _, dir := range []string{spokeChartDir, hubChartDir} {
		for _, values := range []map[string]any{nil, {"replicaCount": 1}} {
			res := lint.AllWithKubeVersion(dir, values, "istio-system", chartKubeVersion)
			for _, m := range res.Messages {
				if m.Severity >= support.ErrorSev {
					t.Errorf("helm lint %s: %s", dir, m)
				} else {
					t.Logf("helm lint %s: %s", dir, m)
				}
			}
		}
	}
}

func TestSpokeChartDefaults(t *testing.T) {
	const ns = "istio-system"
	r := mustRender(t, spokeChartDir, ns, nil)
	noWildcards(t, r)

	if r.has("Namespace", "", ns) {
		t.Error("namespace rendered although namespace.create is false")
	}
	for _, sa := range []string{"meshfed-spoke", "meshfed-reader"} {
		r.get(t, "ServiceAccount", ns, sa, &corev1.ServiceAccount{})
	}
	var token corev1.Secret
	r.get(t, "Secret", ns, "meshfed-reader-token", &token)
	if token.Type != corev1.SecretTypeServiceAccountToken || token.Annotations[corev1.ServiceAccountNameKey] != "meshfed-reader" {
		t.Errorf("reader token secret %+v", token.ObjectMeta)
	}

	// The hub's reader: exactly these rights, in particular no secrets.
	var reader rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", "meshfed-reader-"+ns, &reader)
	requireRules(t, "reader", reader.Rules,
		`"" services get`, `"" services list`, `"" services watch`,
		`"" pods get`, `"" pods list`, `"" pods watch`,
		`"" nodes get`, `"" nodes list`, `"" nodes watch`,
		`"" namespaces get`, `"" namespaces list`, `"" namespaces watch`,
		`"discovery.k8s.io" endpointslices get`, `"discovery.k8s.io" endpointslices list`, `"discovery.k8s.io" endpointslices watch`,
		`"authentication.k8s.io" tokenreviews create`,
	)
	var readerBinding rbacv1.ClusterRoleBinding
	r.get(t, "ClusterRoleBinding", "", "meshfed-reader-"+ns, &readerBinding)
	if readerBinding.RoleRef.Name != reader.Name || len(readerBinding.Subjects) != 1 ||
		readerBinding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "meshfed-reader", Namespace: ns}) {
		t.Errorf("reader binding %+v", readerBinding)
	}

	// The spoke itself.
	var spokeRole rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", "meshfed-spoke-"+ns, &spokeRole)
	requireRules(t, "spoke cluster role", spokeRole.Rules,
		`"" namespaces get`, `"" namespaces list`, `"" namespaces watch`,
		`"" configmaps create`,
		`"" configmaps get istio-ca-root-cert`,
		`"" configmaps list istio-ca-root-cert`,
		`"" configmaps update istio-ca-root-cert`,
		`"" configmaps watch istio-ca-root-cert`,
		`"admissionregistration.k8s.io" mutatingwebhookconfigurations get meshfed-spoke-injector-`+ns,
		`"admissionregistration.k8s.io" mutatingwebhookconfigurations patch meshfed-spoke-injector-`+ns,
		`"admissionregistration.k8s.io" validatingwebhookconfigurations get meshfed-spoke-validator-`+ns,
		`"admissionregistration.k8s.io" validatingwebhookconfigurations patch meshfed-spoke-validator-`+ns,
	)
	var nsRole rbacv1.Role
	r.get(t, "Role", ns, "meshfed-spoke", &nsRole)
	requireRules(t, "spoke role", nsRole.Rules, `"" configmaps get`, `"" configmaps list`, `"" configmaps watch`)
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		var b rbacv1.RoleBinding // the shapes are the same
		name, bns := "meshfed-spoke-"+ns, ""
		if kind == "RoleBinding" {
			name, bns = "meshfed-spoke", ns
		}
		r.get(t, kind, bns, name, &b)
		if len(b.Subjects) != 1 || b.Subjects[0].Name != "meshfed-spoke" || b.Subjects[0].Namespace != ns {
			t.Errorf("%s subjects %+v", kind, b.Subjects)
		}
	}

	var dep appsv1.Deployment
	r.get(t, "Deployment", ns, "meshfed-spoke", &dep)
	if *dep.Spec.Replicas != 2 || dep.Spec.Template.Spec.ServiceAccountName != "meshfed-spoke" {
		t.Errorf("deployment replicas %d sa %s", *dep.Spec.Replicas, dep.Spec.Template.Spec.ServiceAccountName)
	}
	if dep.Spec.Template.Labels[inject.LabelInject] != "false" {
		t.Error("the spoke's own pods are not excluded from injection")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--listen-addr=:15017", "--inject-configmap=istio-system/istio-sidecar-injector",
		"--tls-cert-file=/etc/meshfed/tls/tls.crt", "--tls-key-file=/etc/meshfed/tls/tls.key"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("spoke args %v lack %s", c.Args, arg)
		}
	}
	knownFlags(t, "meshfed-spoke", binaryFlags(t, spokeBinary), c.Args)
	if c.Image != "ghcr.io/meshfed/meshfed-spoke:0.1.0" || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("spoke container %s, readiness %+v", c.Image, c.ReadinessProbe.HTTPGet)
	}

	var svc corev1.Service
	r.get(t, "Service", ns, "meshfed-spoke", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https-webhook" {
		t.Errorf("service ports %+v", svc.Spec.Ports)
	}
	var pdb policyv1.PodDisruptionBudget
	r.get(t, "PodDisruptionBudget", ns, "meshfed-spoke", &pdb)
	if pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("pdb minAvailable %v", pdb.Spec.MinAvailable)
	}

	// Istio's two-webhook injection setup.
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	r.get(t, "MutatingWebhookConfiguration", "", "meshfed-spoke-injector-"+ns, &mwc)
	if len(mwc.Webhooks) != 2 {
		t.Fatalf("mutating webhooks: %d", len(mwc.Webhooks))
	}
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != "meshfed-spoke" ||
			*w.ClientConfig.Service.Path != "/inject" || *w.FailurePolicy != admissionregistrationv1.Fail ||
			*w.SideEffects != admissionregistrationv1.SideEffectClassNone || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
			t.Errorf("webhook %s: %+v", w.Name, w)
		}
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) ||
			!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
			t.Errorf("webhook %s rules %+v", w.Name, w.Rules)
		}
	}
	nsHook, objHook := mwc.Webhooks[0], mwc.Webhooks[1]
	if e := nsHook.NamespaceSelector.MatchExpressions; len(e) != 1 || e[0].Key != "istio-injection" || e[0].Values[0] != "enabled" {
		t.Errorf("namespace webhook selects %+v", nsHook.NamespaceSelector)
	}
	if e := nsHook.ObjectSelector.MatchExpressions; len(e) != 1 || e[0].Operator != "NotIn" || e[0].Values[0] != "false" {
		t.Errorf("namespace webhook objects %+v", nsHook.ObjectSelector)
	}
	if e := objHook.ObjectSelector.MatchExpressions; len(e) != 1 || e[0].Key != inject.LabelInject || e[0].Operator != "In" || e[0].Values[0] != "true" {
		t.Errorf("object webhook objects %+v", objHook.ObjectSelector)
	}
	if e := objHook.NamespaceSelector.MatchExpressions; len(e) != 2 || e[0].Key != "istio-injection" || e[0].Operator != "DoesNotExist" {
		t.Errorf("object webhook namespaces %+v", objHook.NamespaceSelector)
	}

	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	r.get(t, "ValidatingWebhookConfiguration", "", "meshfed-spoke-validator-"+ns, &vwc)
	if len(vwc.Webhooks) != 1 {
		t.Fatalf("validating webhooks: %d", len(vwc.Webhooks))
	}
	vw := vwc.Webhooks[0]
	if *vw.ClientConfig.Service.Path != "/validate" || len(vw.Rules) != 2 ||
		!slices.Equal(vw.Rules[0].APIGroups, []string{"networking.istio.io"}) ||
		!slices.Equal(vw.Rules[0].APIVersions, []string{"v1", "v1beta1", "v1alpha3"}) ||
		!slices.Equal(vw.Rules[0].Resources, []string{"virtualservices", "destinationrules", "serviceentries", "sidecars", "gateways"}) ||
		!slices.Equal(vw.Rules[1].APIGroups, []string{"security.istio.io"}) ||
		!slices.Equal(vw.Rules[1].APIVersions, []string{"v1", "v1beta1"}) ||
		!slices.Equal(vw.Rules[1].Resources, []string{"peerauthentications", "authorizationpolicies"}) {
		t.Errorf("validating webhook %+v", vw)
	}
	for _, rule := range vw.Rules {
		if !slices.Equal(rule.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
			t.Errorf("validating webhook rule %+v: operations", rule)
		}
	}

	// The injection ConfigMap parses as the spoke will parse it, and
	// carries meshfed's templates unchanged.
	var cm corev1.ConfigMap
	r.get(t, "ConfigMap", ns, "istio-sidecar-injector", &cm)
	cfg, err := inject.ParseConfigMap(cm.Data)
	if err != nil {
		t.Fatalf("injection ConfigMap: %v", err)
	}
	if got := cfg.Templates(); !slices.Equal(got, []string{"gateway", "grpc-agent", "sidecar"}) {
		t.Errorf("templates %v", got)
	}
	var file inject.ConfigFile
	if err := yamlUnmarshal(cm.Data[inject.ConfigKey], &file); err != nil {
		t.Fatal(err)
	}
	for name, want := range inject.BuiltinTemplates() {
		if file.Templates[name] != want {
			t.Errorf("chart template %s differs from spoke/inject/templates/%s.yaml", name, name)
		}
	}
	var values map[string]any
	if err := json.Unmarshal([]byte(cm.Data[inject.ValuesKey]), &values); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"clusterID": "Kubernetes", "trustDomain": "cluster.local",
		"discoveryAddress": "meshfed-hub.istio-system.svc:15012", "caAddress": "meshfed-hub.istio-system.svc:15012",
	} {
		if values[k] != want {
			t.Errorf("values.%s = %v, want %v", k, values[k], want)
		}
	}
}

// TestSpokeChartFilesMatchTemplates keeps the chart's copies of the
// injection templates equal to the spoke's (the chart cannot reach
// outside its directory, so they are copies).
func TestSpokeChartFilesMatchTemplates(t *testing.T) {
	for name, want := range inject.BuiltinTemplates() {
		got, err := os.ReadFile(filepath.Join(spokeChartDir, "files", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("remote-charts/spoke/files/%s.yaml differs from spoke/inject/templates/%s.yaml: copy it over", name, name)
		}
	}
}

func TestSpokeChartOverrides(t *testing.T) {
	const ns = "mesh-spoke"
	r := mustRender(t, spokeChartDir, ns, map[string]any{
		"clusterID":    "cluster-7",
		"network":      "net-7",
		"namespace":    map[string]any{"create": true},
		"replicaCount": 1,
		"hub":          map[string]any{"discoveryAddress": "hub.example.com:443", "caAddress": "ca.example.com:8443"},
		"reader":       map[string]any{"enabled": false},
		"webhook": map[string]any{
			"url": "https://10.0.0.1:9443/", "caBundle": "Q0E=", "tls": map[string]any{"secretName": ""},
			"injection":  map[string]any{"failurePolicy": "Ignore"},
			"validation": map[string]any{"enabled": false},
		},
		"injection": map[string]any{
			"defaultTemplates": []any{"grpc-agent"},
			"templates":        map[string]any{"custom": "metadata:\n  labels:\n    custom: {{ toJSON .Values.flavour }}\n"},
			"extraValues":      map[string]any{"flavour": "plain", "clusterID": "overridden"},
		},
	})
	noWildcards(t, r)
	var nsObj corev1.Namespace
	r.get(t, "Namespace", "", ns, &nsObj)
	if nsObj.Labels["istio-injection"] != "disabled" {
		t.Errorf("namespace labels %v", nsObj.Labels)
	}
	for _, gone := range []string{"ServiceAccount/" + ns + "/meshfed-reader", "ClusterRole//meshfed-reader-" + ns,
		"ValidatingWebhookConfiguration//meshfed-spoke-validator-" + ns, "PodDisruptionBudget/" + ns + "/meshfed-spoke"} {
		if r.byKey[gone] != nil {
			t.Errorf("%s rendered", gone)
		}
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	r.get(t, "MutatingWebhookConfiguration", "", "meshfed-spoke-injector-"+ns, &mwc)
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.URL == nil || *w.ClientConfig.URL != "https://10.0.0.1:9443/inject" || w.ClientConfig.Service != nil ||
			string(w.ClientConfig.CABundle) != "CA" || *w.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("webhook %s client %+v policy %v", w.Name, w.ClientConfig, *w.FailurePolicy)
		}
	}
	var dep appsv1.Deployment
	r.get(t, "Deployment", ns, "meshfed-spoke", &dep)
	args := dep.Spec.Template.Spec.Containers[0].Args
	knownFlags(t, "meshfed-spoke", binaryFlags(t, spokeBinary), args)
	vols := dep.Spec.Template.Spec.Volumes
	if !slices.Contains(args, "--dev-cert-hosts=meshfed-spoke.mesh-spoke.svc,meshfed-spoke.mesh-spoke.svc.cluster.local") ||
		slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--tls-cert-file") }) ||
		// The trust-bundle shim: the hub's CA, this cluster's ID, and a
		// projected token the hub can review (audience istio-ca).
		!slices.Contains(args, "--hub-ca-addr=ca.example.com:8443") || !slices.Contains(args, "--cluster-id=cluster-7") ||
		len(vols) != 1 || vols[0].Projected == nil || vols[0].Projected.Sources[0].ServiceAccountToken == nil ||
		vols[0].Projected.Sources[0].ServiceAccountToken.Audience != "istio-ca" {
		t.Errorf("args %v volumes %v", args, vols)
	}
	var cm corev1.ConfigMap
	r.get(t, "ConfigMap", ns, "istio-sidecar-injector", &cm)
	cfg, err := inject.ParseConfigMap(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Templates(), []string{"custom", "gateway", "grpc-agent", "sidecar"}) || !slices.Equal(cfg.DefaultTemplates(), []string{"grpc-agent"}) {
		t.Errorf("templates %v defaults %v", cfg.Templates(), cfg.DefaultTemplates())
	}
	var values map[string]any
	_ = json.Unmarshal([]byte(cm.Data[inject.ValuesKey]), &values)
	if values["clusterID"] != "overridden" || values["network"] != "net-7" || values["caAddress"] != "ca.example.com:8443" || values["flavour"] != "plain" {
		t.Errorf("values %v", values)
	}
}

// TestSpokeChartGateways: a gateway of the chart is what Istio's gateway
// chart deploys (a Deployment of one istio-proxy container, image "auto",
// that the gateway template injects; its Service and ServiceAccount), and
// the hub's reader may read Secrets in the gateway's namespace only.
func TestSpokeChartGateways(t *testing.T) {
	const ns = "istio-system"
	r := mustRender(t, spokeChartDir, ns, map[string]any{
		"gateways": []any{map[string]any{
			"name": "ingress", "namespace": "istio-ingress", "replicas": 2,
			"labels":  map[string]any{"istio": "ingressgateway"},
			"service": map[string]any{"ports": []any{map[string]any{"name": "http2", "port": 80, "targetPort": 8080}}},
		}},
	})
	noWildcards(t, r)
	var dep appsv1.Deployment
	r.get(t, "Deployment", "istio-ingress", "ingress", &dep)
	pod := dep.Spec.Template
	if *dep.Spec.Replicas != 2 || pod.Annotations[inject.AnnotationTemplates] != inject.TemplateGateway ||
		pod.Labels["istio"] != "ingressgateway" || pod.Labels["sidecar.istio.io/inject"] != "true" ||
		len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != "istio-proxy" || pod.Spec.Containers[0].Image != "auto" ||
		pod.Spec.ServiceAccountName != "ingress" || pod.Spec.Containers[0].Ports[0].ContainerPort != 8080 {
		t.Errorf("gateway Deployment %+v", dep.Spec)
	}
	var svc corev1.Service
	r.get(t, "Service", "istio-ingress", "ingress", &svc)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Selector["istio"] != "ingressgateway" ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.IntValue() != 8080 {
		t.Errorf("gateway Service %+v", svc.Spec)
	}
	var sa corev1.ServiceAccount
	r.get(t, "ServiceAccount", "istio-ingress", "ingress", &sa)
	var role rbacv1.Role
	r.get(t, "Role", "istio-ingress", "ingress-credentials", &role)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "watch"}) {
		t.Errorf("credentials Role %+v", role.Rules)
	}
	var rb rbacv1.RoleBinding
	r.get(t, "RoleBinding", "istio-ingress", "ingress-credentials", &rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "meshfed-reader" || rb.Subjects[0].Namespace != ns {
		t.Errorf("credentials RoleBinding subjects %+v", rb.Subjects)
	}
}

func TestHubChart(t *testing.T) {
	const ns = "meshfed"
	r := mustRender(t, hubChartDir, ns, nil)
	noWildcards(t, r)
	// The hub's only cluster-wide rights in the config cluster: reviewing
	// the tokens of xDS callers that name no cluster (istioctl), and
	// reading the mesh's Istio config (and writing its status).
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		for _, u := range r.objects {
			if n := u.GetName(); u.GetKind() == kind && n != "meshfed-hub-tokenreview-"+ns && n != "meshfed-hub-istioconfig-"+ns &&
				(kind != "ClusterRole" || n != "meshfed-fleet-reader") {
				t.Errorf("unexpected cluster-wide %s %s", kind, u.GetName())
			}
		}
	}
	// The role people are bound to, to read the fleet on the monitoring
	// port, and nothing else.
	var reader rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", "meshfed-fleet-reader", &reader)
	requireRules(t, "fleet reader role", reader.Rules, `"meshfed.io" fleet get`)
	var config rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", "meshfed-hub-istioconfig-"+ns, &config)
	requireRules(t, "hub Istio config role", config.Rules,
		`"networking.istio.io" virtualservices get`, `"networking.istio.io" virtualservices list`, `"networking.istio.io" virtualservices watch`,
		`"networking.istio.io" destinationrules get`, `"networking.istio.io" destinationrules list`, `"networking.istio.io" destinationrules watch`,
		`"networking.istio.io" virtualservices/status patch`, `"networking.istio.io" destinationrules/status patch`,
		`"networking.istio.io" sidecars get`, `"networking.istio.io" sidecars list`, `"networking.istio.io" sidecars watch`,
		`"networking.istio.io" sidecars/status patch`,
		`"networking.istio.io" gateways get`, `"networking.istio.io" gateways list`, `"networking.istio.io" gateways watch`,
		`"networking.istio.io" gateways/status patch`,
		`"gateway.networking.k8s.io" gatewayclasses get`, `"gateway.networking.k8s.io" gatewayclasses list`, `"gateway.networking.k8s.io" gatewayclasses watch`,
		`"gateway.networking.k8s.io" gateways get`, `"gateway.networking.k8s.io" gateways list`, `"gateway.networking.k8s.io" gateways watch`,
		`"gateway.networking.k8s.io" httproutes get`, `"gateway.networking.k8s.io" httproutes list`, `"gateway.networking.k8s.io" httproutes watch`,
		`"gateway.networking.k8s.io" grpcroutes get`, `"gateway.networking.k8s.io" grpcroutes list`, `"gateway.networking.k8s.io" grpcroutes watch`,
		`"gateway.networking.k8s.io" tlsroutes get`, `"gateway.networking.k8s.io" tlsroutes list`, `"gateway.networking.k8s.io" tlsroutes watch`,
		`"gateway.networking.k8s.io" referencegrants get`, `"gateway.networking.k8s.io" referencegrants list`, `"gateway.networking.k8s.io" referencegrants watch`,
		`"gateway.networking.k8s.io" gatewayclasses/status patch`, `"gateway.networking.k8s.io" gateways/status patch`,
		`"gateway.networking.k8s.io" httproutes/status patch`, `"gateway.networking.k8s.io" grpcroutes/status patch`,
		`"gateway.networking.k8s.io" tlsroutes/status patch`,
		`"" namespaces get`, `"" namespaces list`, `"" namespaces watch`,
		// Which kinds exist (a kind without its CRD is read as empty).
		`"apiextensions.k8s.io" customresourcedefinitions get`, `"apiextensions.k8s.io" customresourcedefinitions list`,
		`"apiextensions.k8s.io" customresourcedefinitions watch`,
		`"networking.istio.io" serviceentries get`, `"networking.istio.io" serviceentries list`, `"networking.istio.io" serviceentries watch`,
		`"networking.istio.io" serviceentries/status patch`,
		`"security.istio.io" peerauthentications get`, `"security.istio.io" peerauthentications list`, `"security.istio.io" peerauthentications watch`,
		`"security.istio.io" authorizationpolicies get`, `"security.istio.io" authorizationpolicies list`, `"security.istio.io" authorizationpolicies watch`,
		`"security.istio.io" peerauthentications/status patch`, `"security.istio.io" authorizationpolicies/status patch`,
	)
	var configBinding rbacv1.ClusterRoleBinding
	r.get(t, "ClusterRoleBinding", "", "meshfed-hub-istioconfig-"+ns, &configBinding)
	if configBinding.RoleRef.Name != config.Name || len(configBinding.Subjects) != 1 || configBinding.Subjects[0].Name != "meshfed-hub" {
		t.Errorf("Istio config binding %+v", configBinding)
	}
	var review rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", "meshfed-hub-tokenreview-"+ns, &review)
	requireRules(t, "hub token review role", review.Rules, `"authentication.k8s.io" tokenreviews create`, `"authorization.k8s.io" subjectaccessreviews create`)
	var reviewBinding rbacv1.ClusterRoleBinding
	r.get(t, "ClusterRoleBinding", "", "meshfed-hub-tokenreview-"+ns, &reviewBinding)
	if reviewBinding.RoleRef.Name != review.Name || len(reviewBinding.Subjects) != 1 ||
		reviewBinding.Subjects[0].Name != "meshfed-hub" || reviewBinding.Subjects[0].Namespace != ns {
		t.Errorf("token review binding %+v", reviewBinding)
	}
	var role rbacv1.Role
	r.get(t, "Role", ns, "meshfed-hub", &role)
	requireRules(t, "hub role", role.Rules,
		`"" secrets get`, `"" secrets list`, `"" secrets watch`, `"" secrets create`,
		`"" configmaps get meshfed-ca-retiring`, `"" configmaps update meshfed-ca-retiring`, `"" configmaps create`)

	var dep appsv1.Deployment
	r.get(t, "Deployment", ns, "meshfed-hub", &dep)
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d", *dep.Spec.Replicas)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, a := range []string{
		"--namespace=meshfed", "--replica-id=$(POD_NAME)", "--xds-addr=", "--monitoring-addr=:15014",
		"--gossip-addr=:7946", "--gossip-advertise-addr=$(POD_IP):7946",
		"--join=meshfed-hub-gossip.meshfed.svc.cluster.local:7946",
		"--peer-addr=:15011", "--peer-advertise-addr=$(POD_IP):15011", "--watch-replicas=1",
		"--ca-addr=:15012", "--trust-domain=cluster.local", "--ca-audience=istio-ca",
		"--root-spread=1m", "--root-retire-grace=1m",
	} {
		if !slices.Contains(args, a) {
			t.Errorf("hub args lack %s: %v", a, args)
		}
	}
	hubFlags := binaryFlags(t, framework.TestHubBinary)
	knownFlags(t, "meshfed-hub", hubFlags, args)
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--gossip-key-file") }) {
		t.Errorf("gossip key without a secret: %v", args)
	}
	var svc corev1.Service
	r.get(t, "Service", ns, "meshfed-hub", &svc)
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	// The plaintext xDS port is off by default: neither served nor exposed.
	if _, ok := ports["grpc-xds"]; ok || ports["grpc-peer"] != 15011 || ports["grpc-ca"] != 15012 || ports["http-monitoring"] != 15014 {
		t.Errorf("service ports %v", ports)
	}
	var gossip corev1.Service
	r.get(t, "Service", ns, "meshfed-hub-gossip", &gossip)
	if gossip.Spec.ClusterIP != corev1.ClusterIPNone || !gossip.Spec.PublishNotReadyAddresses || len(gossip.Spec.Ports) != 2 {
		t.Errorf("gossip service %+v", gossip.Spec)
	}
	var pdb policyv1.PodDisruptionBudget
	r.get(t, "PodDisruptionBudget", ns, "meshfed-hub", &pdb)
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb %+v", pdb.Spec)
	}

	// The monitoring port over TLS, with identities that read it by
	// certificate.
	r = mustRender(t, hubChartDir, ns, map[string]any{"monitoring": map[string]any{"tls": true,
		"debugIdentities": []any{"spiffe://cluster.local/ns/ops/sa/prober"}}})
	r.get(t, "Deployment", ns, "meshfed-hub", &dep)
	args = dep.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--monitoring-tls") || !slices.Contains(args, "--debug-identities=spiffe://cluster.local/ns/ops/sa/prober") ||
		dep.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("monitoring over TLS: args %v, readiness %+v", args, dep.Spec.Template.Spec.Containers[0].ReadinessProbe)
	}
	knownFlags(t, "meshfed-hub", hubFlags, args)

	// Overrides: a gossip key, peer certificates, more replicas, no CA,
	// the plaintext port on.
	r = mustRender(t, hubChartDir, ns, map[string]any{
		"replicaCount": 5, "watchReplicas": 2, "remoteSecretNamespace": "istio-system", "plaintextXDS": true,
		"gossip": map[string]any{"keySecret": map[string]any{"name": "hub-gossip", "key": "k"}},
		"peer":   map[string]any{"tlsSecret": "hub-peer"},
		"ca":     map[string]any{"enabled": false},
	})
	r.get(t, "Deployment", ns, "meshfed-hub", &dep)
	args = dep.Spec.Template.Spec.Containers[0].Args
	for _, a := range []string{"--namespace=istio-system", "--watch-replicas=2", "--gossip-key-file=/etc/meshfed/gossip/k",
		"--peer-tls-cert=/etc/meshfed/peer/tls.crt", "--peer-tls-ca=/etc/meshfed/peer/ca.crt", "--ca-addr=", "--xds-addr=:15010"} {
		if !slices.Contains(args, a) {
			t.Errorf("hub args lack %s: %v", a, args)
		}
	}
	knownFlags(t, "meshfed-hub", hubFlags, args)
	vols := map[string]string{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.Secret.SecretName
	}
	if vols["gossip-key"] != "hub-gossip" || vols["peer-tls"] != "hub-peer" {
		t.Errorf("volumes %v", vols)
	}
	// The Role follows the secrets to their namespace.
	r.get(t, "Role", "istio-system", "meshfed-hub", &role)
	r.get(t, "Service", ns, "meshfed-hub", &svc)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc-xds" && p.Port == 15010 }) {
		t.Errorf("plaintextXDS: service ports %+v", svc.Spec.Ports)
	}
}

// TestSpokeChartEastWest: the eastwest value deploys the network's
// east-west gateway: Pods and Service labelled istio=eastwestgateway and
// with the network, port 15443 on a LoadBalancer Service; it reads no
// credentials (no Role), and without a network the chart refuses it.
func TestSpokeChartEastWest(t *testing.T) {
	const ns = "istio-system"
	r := mustRender(t, spokeChartDir, ns, map[string]any{"network": "network-1", "eastwest": map[string]any{"enabled": true}})
	noWildcards(t, r)
	var dep appsv1.Deployment
	r.get(t, "Deployment", ns, "istio-eastwestgateway", &dep)
	pod := dep.Spec.Template
	if pod.Labels["istio"] != "eastwestgateway" || pod.Labels["topology.istio.io/network"] != "network-1" ||
		pod.Annotations[inject.AnnotationTemplates] != inject.TemplateGateway || pod.Spec.Containers[0].Ports[0].ContainerPort != 15443 {
		t.Errorf("east-west Deployment %+v", dep.Spec)
	}
	var svc corev1.Service
	r.get(t, "Service", ns, "istio-eastwestgateway", &svc)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Labels["topology.istio.io/network"] != "network-1" ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 15443 || svc.Spec.Ports[0].Name != "tls" {
		t.Errorf("east-west Service %+v %+v", svc.Labels, svc.Spec)
	}
	for _, o := range r.objects {
		if o.GetKind() == "Role" && strings.HasPrefix(o.GetName(), "istio-eastwestgateway") {
			t.Errorf("the east-west gateway has a Role %s: it reads no credentials", o.GetName())
		}
	}
	// Another port is said to the hub by the Service's annotation.
	r = mustRender(t, spokeChartDir, ns, map[string]any{"network": "network-1", "eastwest": map[string]any{"enabled": true, "port": 16443}})
	r.get(t, "Service", ns, "istio-eastwestgateway", &svc)
	if svc.Annotations["networking.istio.io/gatewayPort"] != "16443" || svc.Spec.Ports[0].Port != 16443 {
		t.Errorf("east-west Service on 16443: %+v %+v", svc.Annotations, svc.Spec.Ports)
	}
	if _, err := renderChart(spokeChartDir, ns, map[string]any{"eastwest": map[string]any{"enabled": true}}); err == nil ||
		!strings.Contains(err.Error(), "eastwest.enabled needs network") {
		t.Errorf("eastwest without a network: %v", err)
	}
}

func TestChartSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		values map[string]any
		want   string
	}{
		{spokeChartDir, map[string]any{"replicaCount": "three"}, "replicaCount"},
		{hubChartDir, map[string]any{"replicaCount": "three"}, "replicaCount"},
		{spokeChartDir, map[string]any{"replicas": 2}, "replicas"},
		{spokeChartDir, map[string]any{"webhook": map[string]any{"injection": map[string]any{"failurePolicy": "Sometimes"}}}, "failurePolicy"},
		{spokeChartDir, map[string]any{"hub": map[string]any{"discoveryAddress": "no-port"}}, "discoveryAddress"},
		{spokeChartDir, map[string]any{"clusterID": ""}, "clusterID"},
		{spokeChartDir, map[string]any{"webhook": map[string]any{"url": "http://plain"}}, "url"},
		{hubChartDir, map[string]any{"ports": map[string]any{"xds": 70000}}, "xds"},
		{hubChartDir, map[string]any{"clusterSyncTimeout": "soon"}, "clusterSyncTimeout"},
		{hubChartDir, map[string]any{"extraArgs": []any{"rm -rf"}}, "extraArgs"},
	} {
		_, err := renderChart(tc.dir, "istio-system", tc.values)
		if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v, want a schema error about %s", filepath.Base(tc.dir), tc.values, err, tc.want)
		}
	}
}

// TestChartsApply installs the rendered charts into a real kube-apiserver
// with server-side apply, as `helm install` would send them, and reads them
// back. Webhook configurations point at a Service with no Pods behind it;
// the apiserver accepts them (it calls them only for matching requests).
func TestChartsApply(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{})
	c, err := client.New(f.Config().RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, tc := range []struct {
		dir, ns string
		values  map[string]any
	}{
		{spokeChartDir, "meshfed-spoke", map[string]any{"namespace": map[string]any{"create": true}}},
		{hubChartDir, "meshfed-hub", nil},
	} {
		r := mustRender(t, tc.dir, tc.ns, tc.values)
		if !r.has("Namespace", "", tc.ns) {
			if err := f.Config().EnsureNamespace(ctx, tc.ns); err != nil {
				t.Fatal(err)
			}
		}
		// Namespaces first, as Helm orders them.
		objs := slices.Clone(r.objects)
		slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
			return boolRank(a.GetKind() != "Namespace") - boolRank(b.GetKind() != "Namespace")
		})
		for _, u := range objs {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
				client.FieldOwner("meshfed-e2e"), client.ForceOwnership); err != nil {
				t.Errorf("applying %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				continue
			}
			back := &unstructured.Unstructured{}
			back.SetGroupVersionKind(u.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(u), back); err != nil {
				t.Errorf("reading back %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		t.Logf("%s: %d objects applied", filepath.Base(tc.dir), len(objs))
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// yamlUnmarshal decodes YAML (or JSON) into out.
func yamlUnmarshal(s string, out any) error {
	return utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(s)), 4096).Decode(out)
}

// spokeBuild is the meshfed-spoke binary, built once per test process.
var spokeBuild struct {
	once sync.Once
	path string
	err  error
}

func spokeBinary(ctx context.Context) (string, error) {
	spokeBuild.once.Do(func() {
		spokeBuild.path, spokeBuild.err = framework.BuildHubBinary(context.WithoutCancel(ctx),
			framework.BuildOptions{Package: "./spoke/cmd/meshfed-spoke"})
	})
	return spokeBuild.path, spokeBuild.err
}

// binaryFlags returns the flags a meshfed binary accepts, read from its
// -h output (Go's flag package: "  -name type" lines).
func binaryFlags(t *testing.T, binary func(context.Context) (string, error)) map[string]bool {
	t.Helper()
	bin, err := binary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.CommandContext(t.Context(), bin, "-h").CombinedOutput() // -h exits 0 or 2
	flags := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			flags[strings.Fields(rest)[0]] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s -h listed no flags:\n%s", bin, out)
	}
	return flags
}

// knownFlags fails t for every --flag of args that the binary does not
// accept: a chart must not pass what its binary would refuse at start.
func knownFlags(t *testing.T, binary string, flags map[string]bool, args []string) {
	t.Helper()
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasPrefix(a, "--") && !flags[name] {
			t.Errorf("the chart passes %s, which %s does not accept", a, binary)
		}
	}
}
