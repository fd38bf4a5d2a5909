package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/spoke"
	"github.com/meshfed/meshfed/spoke/inject"
)

// spokeNamespace is where the spoke chart is installed, as istiod-remote is.
const spokeNamespace = "istio-system"

// absentHub is the hub address the injection templates are given. Nothing
// listens there: there is no hub in these tests at all. The webhooks never
// call the hub, so injection and validation work without one; the injected
// proxies would find it later.
const absentHub = "hub.meshfed.invalid:15010"

// testSpoke is the built meshfed-spoke running as a process
// (framework.Spoke) against a workload cluster's apiserver, installed as the
// spoke chart installs it: the chart's injection ConfigMap and webhook
// configurations, the latter pointing at the process by URL.
type testSpoke struct {
	addr   string       // 127.0.0.1:<port>
	https  *http.Client // trusts the serving CA
	client client.Client
	chart  *rendered
	caPEM  []byte // the serving CA: what caBundle must hold
}

// startTestSpoke renders the spoke chart for the fleet's config cluster,
// applies its injection ConfigMap, runs meshfed-spoke until the test ends,
// waits for /readyz, and then registers the chart's webhook
// configurations.
func startTestSpoke(t *testing.T, f *framework.Fleet, c client.Client, values map[string]any) *testSpoke {
	t.Helper()
	ctx := t.Context()
	addrs, err := framework.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	s := &testSpoke{addr: addrs[0], client: c}
	cluster := f.Config()

	// A serving certificate for 127.0.0.1, from a CA the apiserver is told
	// to trust through the webhook configurations' caBundle.
	ca, err := pki.NewCA("e2e spoke CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{
		CommonName: "meshfed-spoke", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour, Server: true, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	s.https = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	vals := map[string]any{
		"clusterID": "cluster-1", "network": "network-1",
		"hub":     map[string]any{"discoveryAddress": absentHub},
		"webhook": map[string]any{"url": "https://" + s.addr, "caBundle": base64.StdEncoding.EncodeToString(ca.CertPEM)},
	}
	for k, v := range values {
		vals[k] = v
	}
	s.chart = mustRender(t, spokeChartDir, spokeNamespace, vals)
	if err := cluster.EnsureNamespace(ctx, spokeNamespace); err != nil {
		t.Fatal(err)
	}
	s.apply(t, "ConfigMap", spokeNamespace, "istio-sidecar-injector")

	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s.caPEM = ca.CertPEM
	// The built meshfed-spoke, with the flags the chart gives it.
	proc, err := f.StartSpoke(ctx, cluster.Cluster, framework.SpokeOptions{
		ListenAddr: s.addr,
		Args: []string{
			"--tls-cert-file=" + certFile, "--tls-key-file=" + keyFile, "--ca-bundle-file=" + caFile,
			"--injector-webhook-config=meshfed-spoke-injector-" + spokeNamespace,
			"--validator-webhook-config=meshfed-spoke-validator-" + spokeNamespace,
			"--ca-bundle-interval=200ms",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proc.Stop(); err != nil {
			t.Errorf("meshfed-spoke: %v", err)
		}
	})
	testutil.Eventually(t, time.Minute, poll, func() error {
		select {
		case <-proc.Exited():
			t.Fatalf("meshfed-spoke exited: %v", proc.Err())
		default:
		}
		code, body, err := s.get(spoke.PathReadyz)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz: %d %s", code, body)
		}
		return err
	})
	s.apply(t, "MutatingWebhookConfiguration", "", "meshfed-spoke-injector-"+spokeNamespace)
	s.apply(t, "ValidatingWebhookConfiguration", "", "meshfed-spoke-validator-"+spokeNamespace)
	return s
}

// apply server-side applies one object of the rendered chart.
func (s *testSpoke) apply(t *testing.T, kind, namespace, name string) {
	t.Helper()
	u := s.chart.byKey[kind+"/"+namespace+"/"+name]
	if u == nil {
		t.Fatalf("the spoke chart renders no %s %s/%s", kind, namespace, name)
	}
	if err := s.client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
		client.FieldOwner("meshfed-e2e"), client.ForceOwnership); err != nil {
		t.Fatalf("applying %s %s: %v", kind, name, err)
	}
}

func (s *testSpoke) get(path string) (int, string, error) {
	resp, err := s.https.Get("https://" + s.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// istioCRDs are minimal CRDs of the networking kinds the validating webhook
// covers: served in v1, v1beta1 and v1alpha3, spec and status kept as they
// are (x-kubernetes-preserve-unknown-fields), so that the webhook is the
// only check.
func istioCRDs() []*apiextensionsv1.CustomResourceDefinition {
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec":   {Type: "object", XPreserveUnknownFields: ptr.To(true)},
			"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
	}}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, k := range []struct{ kind, plural string }{
		{"VirtualService", "virtualservices"}, {"DestinationRule", "destinationrules"},
		{"ServiceEntry", "serviceentries"}, {"Sidecar", "sidecars"},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + ".networking.istio.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "networking.istio.io",
				Names: apiextensionsv1.CustomResourceDefinitionNames{
					Kind: k.kind, ListKind: k.kind + "List", Plural: k.plural, Singular: strings.ToLower(k.kind),
				},
				Scope: apiextensionsv1.NamespaceScoped,
			},
		}
		for _, v := range []string{"v1", "v1beta1", "v1alpha3"} {
			crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
				Name: v, Served: true, Storage: v == "v1", Schema: schema,
			})
		}
		out = append(out, crd)
	}
	return out
}

func installIstioCRDs(t *testing.T, cfg *rest.Config) {
	t.Helper()
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: istioCRDs(), MaxTime: time.Minute}); err != nil {
		t.Fatalf("installing Istio CRDs: %v", err)
	}
}

func appPod(namespace, name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "e2e.meshfed.io/app:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
}

func containerNamed(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func envOf(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// injectedStatus returns the pod's injection status, or nil when it was not
// injected.
func injectedStatus(t *testing.T, p *corev1.Pod) *inject.Status {
	t.Helper()
	v, ok := p.Annotations[inject.AnnotationStatus]
	if !ok {
		return nil
	}
	var st inject.Status
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		t.Fatalf("pod %s: status annotation %q: %v", p.Name, v, err)
	}
	return &st
}

// createPod creates p and reads it back from the apiserver.
func createPod(t *testing.T, c client.Client, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	var back corev1.Pod
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

func vsObject(name, version string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/" + version, "kind": "VirtualService",
		"metadata": map[string]any{"name": name, "namespace": "mesh"},
		"spec":     spec,
	}}
}

func istioObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "mesh"},
		"spec":     spec,
	}}
}

// canaryVS routes 90/10 between two destinations; without the host of
// the second, it is the invalid example of the issue.
func canaryVS(secondHost string) map[string]any {
	second := map[string]any{"subset": "v2"}
	if secondHost != "" {
		second["host"] = secondHost
	}
	return map[string]any{
		"hosts": []any{"reviews"},
		"http": []any{map[string]any{"route": []any{
			map[string]any{"destination": map[string]any{"host": "reviews", "subset": "v1"}, "weight": int64(90)},
			map[string]any{"destination": second, "weight": int64(10)},
		}}},
	}
}

// TestSpokeWebhooks runs the spoke against a real kube-apiserver (the
// fleet's one apiserver plays the workload cluster) with the spoke chart's
// webhook configurations, and lets the apiserver call it.
//
// There is no hub in this test at all: the webhooks never call the hub, so
// Pods are injected and configuration validated with none running.
func TestSpokeWebhooks(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{})
	cfg := f.Config().RESTConfig()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	installIstioCRDs(t, cfg)
	for ns, labels := range map[string]map[string]string{
		"mesh":  {inject.LabelNamespaceInjection: "enabled"},
		"plain": nil,
		"off":   {inject.LabelNamespaceInjection: "disabled"},
	} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	s := startTestSpoke(t, f, c, nil)
	t.Logf("spoke ready and webhooks registered in %s", time.Since(start).Round(time.Millisecond))

	// The apiserver picks webhook configurations up asynchronously: probe
	// with dry-run creations (the webhooks declare no side effects) until
	// both answer.
	testutil.Eventually(t, time.Minute, poll, func() error {
		p := appPod("mesh", "probe", nil, nil)
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			t.Fatalf("creating a pod: %v", err) // not a matter of waiting
		}
		if injectedStatus(t, p) == nil {
			return errors.New("probe pod not injected yet")
		}
		vs := vsObject("probe", "v1", canaryVS(""))
		if err := c.Create(ctx, vs, client.DryRunAll); err == nil {
			return errors.New("invalid probe VirtualService admitted: validation webhook not active yet")
		}
		return nil
	})

	t.Run("namespace labelled istio-injection=enabled", func(t *testing.T) {
		p := createPod(t, c, appPod("mesh", "reviews-v1", map[string]string{"app": "reviews"}, nil))
		st := injectedStatus(t, p)
		if st == nil {
			t.Fatalf("pod not injected: %+v", p.ObjectMeta)
		}
		if got := []string{p.Spec.Containers[0].Name, p.Spec.Containers[len(p.Spec.Containers)-1].Name}; got[0] != "app" || got[1] != "istio-proxy" {
			t.Errorf("containers %v", got)
		}
		if p.Spec.InitContainers[0].Name != "istio-init" {
			t.Errorf("init containers %+v", p.Spec.InitContainers)
		}
		proxy := containerNamed(p.Spec.Containers, "istio-proxy")
		for name, want := range map[string]string{
			"ISTIO_META_CLUSTER_ID": "cluster-1", "ISTIO_META_NETWORK": "network-1", "TRUST_DOMAIN": "cluster.local",
			// Sidecars dial the hub's TLS port for xDS too, as istiod's 15012.
			"PROXY_CONFIG": `{"discoveryAddress":"hub.meshfed.invalid:15012"}`, "CA_ADDR": "hub.meshfed.invalid:15012",
		} {
			if got := envOf(proxy, name); got != want {
				t.Errorf("istio-proxy %s = %q, want %q", name, got, want)
			}
		}
		if !slices.Equal(st.Containers, []string{"istio-proxy"}) || !slices.Equal(st.Templates, []string{"sidecar"}) {
			t.Errorf("status %+v", st)
		}
		if p.Labels["security.istio.io/tlsMode"] != "istio" || p.Labels["service.istio.io/canonical-name"] != "reviews" {
			t.Errorf("labels %v", p.Labels)
		}
	})

	t.Run("opt-out wins", func(t *testing.T) {
		// By label: the objectSelector keeps the apiserver from calling.
		p := createPod(t, c, appPod("mesh", "no-sidecar", map[string]string{inject.LabelInject: "false"}, nil))
		// By annotation: the webhook is called and declines.
		q := createPod(t, c, appPod("mesh", "no-sidecar-annotated", nil, map[string]string{inject.LabelInject: "false"}))
		for _, pod := range []*corev1.Pod{p, q} {
			if injectedStatus(t, pod) != nil || len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
				t.Errorf("pod %s injected: %v", pod.Name, pod.Spec.Containers)
			}
		}
	})

	t.Run("pod label opts in", func(t *testing.T) {
		in := createPod(t, c, appPod("plain", "opted-in", map[string]string{inject.LabelInject: "true"}, nil))
		out := createPod(t, c, appPod("plain", "not-asked", nil, nil))
		off := createPod(t, c, appPod("off", "disabled-namespace", map[string]string{inject.LabelInject: "true"}, nil))
		if injectedStatus(t, in) == nil {
			t.Error("pod labelled sidecar.istio.io/inject=true was not injected")
		}
		if injectedStatus(t, out) != nil {
			t.Error("pod in an unlabelled namespace was injected")
		}
		if injectedStatus(t, off) != nil {
			t.Error("pod in a namespace labelled istio-injection=disabled was injected")
		}
	})

	t.Run("grpc-agent template", func(t *testing.T) {
		p := createPod(t, c, appPod("mesh", "grpc-client", nil, map[string]string{inject.AnnotationTemplates: inject.TemplateGRPCAgent}))
		if containerNamed(p.Spec.Containers, "istio-proxy") != nil {
			t.Error("proxyless pod got an Envoy")
		}
		if got := envOf(containerNamed(p.Spec.Containers, "app"), "GRPC_XDS_BOOTSTRAP"); got != "/etc/istio/proxy/grpc-bootstrap.json" {
			t.Errorf("GRPC_XDS_BOOTSTRAP = %q", got)
		}
		agent := containerNamed(p.Spec.InitContainers, "meshfed-agent")
		if agent == nil || agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Fatalf("agent %+v", agent)
		}
		if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "istio-xds" && v.EmptyDir != nil }) {
			t.Errorf("no bootstrap volume: %v", p.Spec.Volumes)
		}
	})

	t.Run("validation", func(t *testing.T) {
		err := c.Create(ctx, vsObject("reviews-bad", "v1", canaryVS("")))
		const want = "spec.http[0].route[1].destination.host: required"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `admission webhook "validation.networking.meshfed.io" denied the request`) {
			t.Fatalf("invalid VirtualService: error %v, want the webhook's %q", err, want)
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("refusal is not 422 Invalid: %v", apierrors.ReasonForError(err))
		}
		good := vsObject("reviews", "v1", canaryVS("reviews"))
		if err := c.Create(ctx, good); err != nil {
			t.Fatalf("valid VirtualService refused: %v", err)
		}
		// Updates are validated too.
		bad := good.DeepCopy()
		bad.Object["spec"] = canaryVS("reviews")
		routes := bad.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["route"].([]any)
		routes[1].(map[string]any)["weight"] = int64(20)
		if err := c.Update(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.http[0].route: weights must add up to 100, got 110") {
			t.Errorf("invalid update: %v", err)
		}
		// Other kinds and versions.
		for _, tc := range []struct {
			obj  *unstructured.Unstructured
			want string // "" = accepted
		}{
			{func() *unstructured.Unstructured {
				o := istioObject("DestinationRule", "reviews", map[string]any{"host": "reviews",
					"subsets": []any{map[string]any{"name": "v1"}, map[string]any{"name": "v1"}}})
				o.SetAPIVersion("networking.istio.io/v1beta1")
				return o
			}(), `spec.subsets[1].name: duplicate subset "v1"`},
			{istioObject("ServiceEntry", "api", map[string]any{"hosts": []any{"api.example.com"},
				"ports": []any{map[string]any{"number": int64(443), "name": "https", "protocol": "TLS"}}, "resolution": "DNS"}), ""},
			{istioObject("ServiceEntry", "db", map[string]any{"hosts": []any{"db.internal"}, "resolution": "STATIC",
				"endpoints": []any{map[string]any{"address": "db1.internal"}}}), `spec.endpoints[0].address: "db1.internal" must be an IP address`},
			{istioObject("Sidecar", "default", map[string]any{"egress": []any{map[string]any{"hosts": []any{"reviews"}}}}),
				`spec.egress[0].hosts[0]: "reviews" must be of the form namespace/dnsName`},
			{istioObject("Sidecar", "default", map[string]any{"egress": []any{map[string]any{"hosts": []any{"./*", "istio-system/*"}}}}), ""},
			{func() *unstructured.Unstructured {
				o := vsObject("typo", "v1alpha3", map[string]any{"hosts": []any{"a"}, "http": []any{map[string]any{"rout": []any{}}}})
				return o
			}(), "spec.http[0].rout: unknown field"},
		} {
			err := c.Create(ctx, tc.obj)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s %s refused: %v", tc.obj.GetKind(), tc.obj.GetName(), err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s %s: error %v, want %q", tc.obj.GetKind(), tc.obj.GetName(), err, tc.want)
			}
		}
	})

	t.Run("configuration is watched and cached", func(t *testing.T) {
		var cm corev1.ConfigMap
		key := client.ObjectKey{Namespace: spokeNamespace, Name: "istio-sidecar-injector"}
		if err := c.Get(ctx, key, &cm); err != nil {
			t.Fatal(err)
		}
		clusterOf := func() (string, error) {
			p := appPod("mesh", "probe", nil, nil)
			if err := c.Create(ctx, p, client.DryRunAll); err != nil {
				return "", err
			}
			proxy := containerNamed(p.Spec.Containers, "istio-proxy")
			if proxy == nil {
				return "", errors.New("not injected")
			}
			return envOf(proxy, "ISTIO_META_CLUSTER_ID"), nil
		}
		// An edit of the values takes effect.
		cm.Data[inject.ValuesKey] = strings.Replace(cm.Data[inject.ValuesKey], `"cluster-1"`, `"cluster-1-renamed"`, 1)
		if err := c.Update(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, poll, func() error {
			got, err := clusterOf()
			if err == nil && got != "cluster-1-renamed" {
				err = fmt.Errorf("CLUSTER_ID %q", got)
			}
			return err
		})
		// A broken edit is refused; the last good configuration stays.
		cm.Data[inject.ConfigKey] = "templates: {sidecar: '{{ .Values.nope'}"
		if err := c.Update(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, poll, func() error {
			code, body, err := s.get(spoke.PathMetrics)
			if err == nil && (code != 200 || !strings.Contains(body, `meshfed_spoke_inject_config_loads_total{result="error"} 1`)) {
				err = errors.New("broken ConfigMap not seen yet")
			}
			return err
		})
		if got, err := clusterOf(); err != nil || got != "cluster-1-renamed" {
			t.Errorf("after a broken edit: %q, %v", got, err)
		}
		// So does deleting the ConfigMap: injection goes on from memory.
		if err := c.Delete(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		if got, err := clusterOf(); err != nil || got != "cluster-1-renamed" {
			t.Errorf("after deletion: %q, %v", got, err)
		}
	})

	t.Run("caBundle is kept current", func(t *testing.T) {
		// Someone (a chart upgrade, a careless edit) breaks the caBundle;
		// the spoke puts its serving CA back.
		name := "meshfed-spoke-injector-" + spokeNamespace
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &mwc); err != nil {
			t.Fatal(err)
		}
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].ClientConfig.CABundle = []byte("stale")
		}
		if err := c.Update(ctx, &mwc); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, converge, poll, func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &mwc); err != nil {
				return err
			}
			for _, w := range mwc.Webhooks {
				if !bytes.Equal(w.ClientConfig.CABundle, s.caPEM) {
					return fmt.Errorf("webhook %s caBundle not restored", w.Name)
				}
			}
			return nil
		})
	})

	t.Run("metrics", func(t *testing.T) {
		code, body, err := s.get(spoke.PathMetrics)
		if err != nil || code != 200 {
			t.Fatalf("metrics: %d %v", code, err)
		}
		for _, series := range []string{
			`meshfed_spoke_webhook_requests_total{result="mutated",webhook="inject"}`,
			`meshfed_spoke_webhook_requests_total{result="allowed",webhook="inject"}`,
			`meshfed_spoke_webhook_requests_total{result="denied",webhook="validate"}`,
			`meshfed_spoke_webhook_requests_total{result="allowed",webhook="validate"}`,
			`meshfed_spoke_webhook_duration_seconds_count{webhook="inject"}`,
		} {
			if !strings.Contains(body, series) {
				t.Errorf("metrics lack %s", series)
			}
		}
	})
}
