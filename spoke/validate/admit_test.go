package validate_test

import (
	"encoding/json"
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
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := json.Marshal(map[string]any{
		"apiVersion": "networking.istio.io/" + version, "kind": "VirtualService",
		"metadata": map[string]any{"name": "reviews", "namespace": "demo"}, "spec": json.RawMessage(js),
	})
	return &admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Group: "networking.istio.io", Version: version, Kind: "VirtualService"},
		Namespace: "demo", Name: "reviews", Operation: op, Object: runtime.RawExtension{Raw: obj},
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
	other := vsRequest(t, "v1", admissionv1.Create, "{}")
	other.Kind.Kind = "Gateway"
	if r := v.Admit(ctx, other); r.Result != webhook.ResultError {
		t.Errorf("gateway: %+v", r)
	}
}
