package validate_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	istiovalidate "github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/spoke/validate"
	"github.com/meshfed/meshfed/spoke/webhook"
)

func vsRequest(t *testing.T, version string, op admissionv1.Operation, spec string) *admissionv1.AdmissionRequest {
	t.Helper()
	return request(t, metav1.GroupVersionKind{Group: "networking.istio.io", Version: version, Kind: "VirtualService"}, op, spec)
}

// request is an AdmissionRequest for object demo/reviews of kind gvk with
// spec (YAML).
func request(t *testing.T, gvk metav1.GroupVersionKind, op admissionv1.Operation, spec string) *admissionv1.AdmissionRequest {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := json.Marshal(map[string]any{
		"apiVersion": gvk.Group + "/" + gvk.Version, "kind": gvk.Kind,
		"metadata": map[string]any{"name": "reviews", "namespace": "demo"}, "spec": json.RawMessage(js),
	})
	return &admissionv1.AdmissionRequest{
		UID: "u", Kind: gvk, Namespace: "demo", Name: "reviews", Operation: op, Object: runtime.RawExtension{Raw: obj},
	}
}

func TestValidatorAdmit(t *testing.T) {
	v := validate.NewValidator(logr.Discard())
	ctx := t.Context()
	for _, version := range istiovalidate.Versions {
		if r := v.Admit(ctx, vsRequest(t, version, admissionv1.Create, "hosts: [a]\nhttp: [{route: [{destination: {host: a}}]}]")); r.Result != webhook.ResultAllowed {
			t.Errorf("%s valid: %+v", version, r)
		}
	}
	r := v.Admit(ctx, vsRequest(t, "v1", admissionv1.Update, "hosts: [a]\nhttp: [{route: [{destination: {}}]}]"))
	if r.Result != webhook.ResultDenied || r.Status.Code != 422 || r.Status.Reason != metav1.StatusReasonInvalid ||
		r.Status.Message != "VirtualService demo/reviews is invalid: spec.http[0].route[0].destination.host: required" ||
		len(r.Status.Details.Causes) != 1 || r.Status.Details.Causes[0].Field != "spec.http[0].route[0].destination.host" {
		t.Errorf("invalid: %+v %+v", r, r.Status)
	}
	if r := v.Admit(ctx, vsRequest(t, "v1", admissionv1.Delete, "{}")); r.Result != webhook.ResultAllowed {
		t.Errorf("delete: %+v", r)
	}
	noSpec := vsRequest(t, "v1", admissionv1.Create, "{}")
	noSpec.Object.Raw = []byte(`{"metadata":{"name":"x"}}`)
	if r := v.Admit(ctx, noSpec); r.Result != webhook.ResultDenied || !strings.Contains(r.Status.Message, "spec: required") {
		t.Errorf("no spec: %+v", r.Status)
	}
	// Gateways are validated too; a kind the hub does not read is an
	// error of the webhook's configuration.
	gw := vsRequest(t, "v1", admissionv1.Create, "{}")
	gw.Kind.Kind = "Gateway"
	if r := v.Admit(ctx, gw); r.Result != webhook.ResultDenied || !strings.Contains(r.Status.Message, "spec.servers: required") {
		t.Errorf("gateway: %+v", r)
	}
	other := vsRequest(t, "v1", admissionv1.Create, "{}")
	other.Kind.Kind = "WorkloadEntry"
	if r := v.Admit(ctx, other); r.Result != webhook.ResultError {
		t.Errorf("workload entry: %+v", r)
	}
}

// TestValidatorAdmitSecurity: the security kinds are validated in
// security.istio.io v1 and v1beta1, and only there.
func TestValidatorAdmitSecurity(t *testing.T) {
	v := validate.NewValidator(logr.Discard())
	ctx := t.Context()
	gvk := func(group, version, kind string) metav1.GroupVersionKind {
		return metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}
	}
	for _, version := range []string{"v1", "v1beta1"} {
		for _, tc := range []struct{ kind, spec string }{
			{"PeerAuthentication", "mtls: {mode: STRICT}"},
			{"AuthorizationPolicy", "action: DENY\nrules: [{from: [{source: {notNamespaces: [demo]}}]}]"},
			{"AuthorizationPolicy", "{}"}, // ALLOW nothing: valid
		} {
			r := v.Admit(ctx, request(t, gvk("security.istio.io", version, tc.kind), admissionv1.Create, tc.spec))
			if r.Result != webhook.ResultAllowed {
				t.Errorf("%s %s %q: %+v %+v", version, tc.kind, tc.spec, r, r.Status)
			}
		}
	}

	r := v.Admit(ctx, request(t, gvk("security.istio.io", "v1", "AuthorizationPolicy"), admissionv1.Update,
		"action: CUSTOM\nrules: [{to: [{operation: {ports: [http]}}]}]"))
	wantCauses := []metav1.StatusCause{
		{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.provider.name",
			Message: "required with action CUSTOM (the extension provider of the mesh config that decides)"},
		{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.rules[0].to[0].operation.ports[0]",
			Message: `"http" must be a port number between 1 and 65535`},
	}
	if r.Result != webhook.ResultDenied || r.Status == nil || r.Status.Code != 422 || r.Status.Reason != metav1.StatusReasonInvalid {
		t.Fatalf("invalid policy: %+v %+v", r, r.Status)
	}
	if d := r.Status.Details; d == nil || d.Group != "security.istio.io" || d.Kind != "AuthorizationPolicy" || d.Name != "reviews" ||
		!slices.Equal(d.Causes, wantCauses) {
		t.Errorf("details %+v", r.Status.Details)
	}
	if want := "AuthorizationPolicy demo/reviews is invalid: spec.provider.name: required with action CUSTOM " +
		`(the extension provider of the mesh config that decides); spec.rules[0].to[0].operation.ports[0]: "http" must be a port number between 1 and 65535`; r.Status.Message != want {
		t.Errorf("message:\n  got  %s\n  want %s", r.Status.Message, want)
	}
	r = v.Admit(ctx, request(t, gvk("security.istio.io", "v1beta1", "PeerAuthentication"), admissionv1.Create,
		"portLevelMtls: {8080: {mode: DISABLE}}"))
	if r.Result != webhook.ResultDenied || len(r.Status.Details.Causes) != 1 || r.Status.Details.Causes[0].Field != "spec.portLevelMtls" {
		t.Errorf("port-level mTLS without selector: %+v %+v", r, r.Status)
	}
	if r := v.Admit(ctx, request(t, gvk("security.istio.io", "v1", "AuthorizationPolicy"), admissionv1.Delete, "{action: DENY}")); r.Result != webhook.ResultAllowed {
		t.Errorf("delete: %+v", r)
	}

	// Each kind only in its own group and versions.
	for _, k := range []metav1.GroupVersionKind{
		gvk("networking.istio.io", "v1", "AuthorizationPolicy"),
		gvk("security.istio.io", "v1alpha3", "PeerAuthentication"),
		gvk("security.istio.io", "v1", "VirtualService"),
		gvk("security.istio.io", "v1", "RequestAuthentication"),
		gvk("networking.istio.io", "v1alpha1", "Sidecar"),
	} {
		if r := v.Admit(ctx, request(t, k, admissionv1.Create, "{}")); r.Result != webhook.ResultError || r.Status == nil || r.Status.Code != 400 {
			t.Errorf("%s: %+v %+v", k, r, r.Status)
		}
	}
}
