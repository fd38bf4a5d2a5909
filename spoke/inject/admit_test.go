package inject_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshfed/meshfed/spoke/inject"
	"github.com/meshfed/meshfed/spoke/webhook"
)

// fakeNamespaces is a fixed map of namespace labels (a unit-test fake; the
// envtest scenario in e2e uses the real NamespaceCache).
type fakeNamespaces map[string]map[string]string

func (f fakeNamespaces) Labels(_ context.Context, name string) (map[string]string, error) {
	if name == "broken" {
		return nil, errors.New("apiserver unreachable")
	}
	return f[name], nil
}

var namespaces = fakeNamespaces{
	"mesh":  {inject.LabelNamespaceInjection: "enabled"},
	"plain": {},
}

func newInjector(t testing.TB, loaded bool) *inject.Injector {
	t.Helper()
	var store inject.Store
	if loaded {
		store.Set(testConfig(t))
	}
	return inject.New(inject.Options{Config: &store, Namespaces: namespaces, Log: logr.Discard()})
}

func podRequest(t testing.TB, ns string, op admissionv1.Operation, p *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	return &admissionv1.AdmissionRequest{
		UID:       types.UID("uid-1"),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: ns,
		Operation: op,
		Object:    runtime.RawExtension{Raw: podJSON(t, p)},
	}
}

func TestAdmit(t *testing.T) {
	ctx := t.Context()
	inj := newInjector(t, true)
	for _, tc := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
		want webhook.Result
		msg  string
	}{
		{"enabled namespace", podRequest(t, "mesh", admissionv1.Create, appPod()), webhook.ResultMutated, ""},
		{"plain namespace", podRequest(t, "plain", admissionv1.Create, appPod()), webhook.ResultAllowed, ""},
		{"opt-in", podRequest(t, "plain", admissionv1.Create, appPod(func(p *corev1.Pod) {
			p.Labels[inject.LabelInject] = "true"
		})), webhook.ResultMutated, ""},
		{"opt-out", podRequest(t, "mesh", admissionv1.Create, appPod(func(p *corev1.Pod) {
			p.Labels[inject.LabelInject] = "false"
		})), webhook.ResultAllowed, ""},
		{"update", podRequest(t, "mesh", admissionv1.Update, appPod()), webhook.ResultAllowed, ""},
		{"unknown template", podRequest(t, "mesh", admissionv1.Create, appPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationTemplates: "envoy"}
		})), webhook.ResultDenied, `inject.istio.io/templates: "envoy" (have gateway, grpc-agent, sidecar)`},
		{"namespace lookup fails", podRequest(t, "broken", admissionv1.Create, appPod()), webhook.ResultError, "apiserver unreachable"},
		{"not a pod", func() *admissionv1.AdmissionRequest {
			r := podRequest(t, "mesh", admissionv1.Create, appPod())
			r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
			return r
		}(), webhook.ResultError, "expected a v1 Pod, got apps/v1 Deployment"},
		{"object not a pod", func() *admissionv1.AdmissionRequest {
			r := podRequest(t, "mesh", admissionv1.Create, appPod())
			r.Object.Raw = []byte(`{"spec":{"containers":"many"}}`)
			return r
		}(), webhook.ResultError, "invalid pod"},
		{"no object", func() *admissionv1.AdmissionRequest {
			r := podRequest(t, "mesh", admissionv1.Create, appPod())
			r.Object.Raw = nil
			return r
		}(), webhook.ResultError, "no object"},
	} {
		resp := inj.Admit(ctx, tc.req)
		if resp.Result != tc.want {
			t.Errorf("%s: result %s, want %s (%+v)", tc.name, resp.Result, tc.want, resp.Status)
			continue
		}
		if tc.msg != "" && (resp.Status == nil || !strings.Contains(resp.Status.Message, tc.msg)) {
			t.Errorf("%s: status %+v, want message containing %q", tc.name, resp.Status, tc.msg)
		}
	}
}

func TestAdmitWithoutConfig(t *testing.T) {
	inj := newInjector(t, false)
	// A Pod that is not to be injected does not need a configuration.
	if r := inj.Admit(t.Context(), podRequest(t, "plain", admissionv1.Create, appPod())); r.Result != webhook.ResultAllowed {
		t.Errorf("plain namespace: %s", r.Result)
	}
	r := inj.Admit(t.Context(), podRequest(t, "mesh", admissionv1.Create, appPod()))
	if r.Result != webhook.ResultError || r.Status.Code != http.StatusServiceUnavailable {
		t.Errorf("enabled namespace without configuration: %+v", r)
	}
}

// TestAdmitTwice runs a Pod through the whole HTTP handler, applies the
// patch, and sends the result again: the second review admits it unchanged.
func TestAdmitTwice(t *testing.T) {
	srv := webhook.NewServer("inject", newInjector(t, true), nil, nil, logr.Discard())
	req := podRequest(t, "mesh", admissionv1.Create, appPod())
	first := review(t, srv, req)
	if !first.Allowed || first.PatchType == nil || *first.PatchType != admissionv1.PatchTypeJSONPatch || first.UID != req.UID {
		t.Fatalf("first response %+v", first)
	}
	_, injected := applyPatch(t, req.Object.Raw, first.Patch)
	req.Object.Raw = injected
	second := review(t, srv, req)
	if !second.Allowed || second.Patch != nil {
		t.Errorf("second response %+v, want allowed without patch", second)
	}
}

func review(t testing.TB, h http.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: webhook.APIVersion, Kind: webhook.Kind}, Request: req,
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %s: %v", rec.Body, err)
	}
	return out.Response
}

// FuzzInjectHandler feeds arbitrary bodies to the injection webhook: it must
// answer every one (HTTP 400 or a review with the request's UID), never
// panic, and any patch it returns must apply to the object it was given.
func FuzzInjectHandler(f *testing.F) {
	valid := func(raw string) string {
		return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",` +
			`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
			`"namespace":"mesh","operation":"CREATE","object":` + raw + `}}`
	}
	pod, _ := json.Marshal(appPod())
	for _, seed := range []string{
		valid(string(pod)),
		valid(`{"metadata":{"annotations":{"inject.istio.io/templates":"grpc-agent"}},"spec":{"containers":[{"name":"a"}]}}`),
		valid(`{"metadata":{"labels":{"sidecar.istio.io/inject":"true"}},"spec":{"initContainers":[{"name":"istio-init"}]}}`),
		valid(`{"spec":{"containers":null}}`),
		valid(`[]`),
		valid(`null`),
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		`{"kind":`,
		``,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	srv := webhook.NewServer("inject", newInjector(f, true), nil, nil, logr.Discard())
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body)))
		if rec.Code == http.StatusBadRequest {
			if _, err := webhook.DecodeReview(body); err == nil {
				t.Fatalf("HTTP 400 for a review that decodes: %s", rec.Body)
			}
			return
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
		in, err := webhook.DecodeReview(body)
		if err != nil {
			t.Fatalf("HTTP 200 for a body that does not decode (%v)", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("response %s: %v", rec.Body, err)
		}
		if out.Response.UID != in.Request.UID {
			t.Fatalf("response UID %q, request %q", out.Response.UID, in.Request.UID)
		}
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
			t.Fatalf("refusal without a message: %+v", out.Response)
		}
		if out.Response.Patch != nil {
			applyPatch(t, in.Request.Object.Raw, out.Response.Patch)
		}
	})
}
