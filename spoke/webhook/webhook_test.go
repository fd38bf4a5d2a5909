package webhook_test

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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/spoke/webhook"
)

const validReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",` +
	`"request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}}`

// byOperation denies DELETE, fails UPDATE, panics on CONNECT and admits
// the rest.
var byOperation = webhook.AdmitterFunc(func(_ context.Context, req *admissionv1.AdmissionRequest) webhook.Response {
	switch req.Operation {
	case admissionv1.Delete:
		return webhook.Deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "spec.x: required")
	case admissionv1.Update:
		return webhook.Fail(http.StatusServiceUnavailable, errors.New("not ready"))
	case admissionv1.Connect:
		panic("boom")
	}
	return webhook.Patch([]byte(`[{"op":"add","path":"/x","value":1}]`))
})

func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := webhook.NewServer("inject", byOperation, webhook.NewMetrics(reg), nil, logr.Discard())
	post := func(body, contentType string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/inject", strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	withOp := func(op string) string { return strings.Replace(validReview, "CREATE", op, 1) }

	for _, tc := range []struct {
		name, body, contentType string
		code                    int
		msg                     string // in the HTTP body (errors) or the review's status
		allowed                 bool
	}{
		{"bad JSON", `{"apiVersion":`, "application/json", 400, "malformed AdmissionReview", false},
		{"empty body", ``, "application/json", 400, "malformed AdmissionReview", false},
		{"not an object", `[1,2]`, "application/json", 400, "malformed AdmissionReview", false},
		{"v1beta1", strings.Replace(validReview, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), "", 400, `"admission.k8s.io/v1beta1"`, false},
		{"wrong kind", strings.Replace(validReview, `"kind":"AdmissionReview"`, `"kind":"Pod"`, 1), "", 400, `kind "Pod"`, false},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "", 400, "no request", false},
		{"no uid", strings.Replace(validReview, `"uid":"u-1",`, "", 1), "", 400, "no uid", false},
		{"field names are case-sensitive", strings.Replace(validReview, `"request"`, `"Request"`, 1), "", 400, "no request", false},
		{"wrong content type", validReview, "text/plain", 415, "want application/json", false},
		{"mutated", validReview, "application/json; charset=utf-8", 200, "", true},
		{"denied", withOp("DELETE"), "", 200, "spec.x: required", false},
		{"failed", withOp("UPDATE"), "", 200, "not ready", false},
		{"panic", withOp("CONNECT"), "", 200, "internal error", false},
	} {
		rec := post(tc.body, tc.contentType)
		if rec.Code != tc.code {
			t.Errorf("%s: HTTP %d (%s), want %d", tc.name, rec.Code, rec.Body, tc.code)
			continue
		}
		if tc.code != 200 {
			if !strings.Contains(rec.Body.String(), tc.msg) {
				t.Errorf("%s: body %q, want %q", tc.name, rec.Body, tc.msg)
			}
			continue
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := out.Response
		if out.APIVersion != webhook.APIVersion || out.Kind != webhook.Kind || r == nil || r.UID != "u-1" || r.Allowed != tc.allowed {
			t.Errorf("%s: review %+v", tc.name, out)
			continue
		}
		if tc.allowed && (r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch || len(r.Patch) == 0) {
			t.Errorf("%s: patch %s type %v", tc.name, r.Patch, r.PatchType)
		}
		if !tc.allowed && (r.Result == nil || !strings.Contains(r.Result.Message, tc.msg)) {
			t.Errorf("%s: result %+v, want %q", tc.name, r.Result, tc.msg)
		}
	}

	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/inject", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: HTTP %d", rec.Code)
	}
	big := bytes.Repeat([]byte(" "), webhook.MaxBodyBytes+1)
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(big)))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: HTTP %d", rec.Code)
	}

	const want = `
# HELP meshfed_spoke_webhook_requests_total Admission requests answered, by webhook (inject, validate) and result (allowed, denied, mutated, error).
# TYPE meshfed_spoke_webhook_requests_total counter
meshfed_spoke_webhook_requests_total{result="denied",webhook="inject"} 1
meshfed_spoke_webhook_requests_total{result="error",webhook="inject"} 13
meshfed_spoke_webhook_requests_total{result="mutated",webhook="inject"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshfed_spoke_webhook_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "meshfed_spoke_webhook_duration_seconds"); n != 1 {
		t.Errorf("duration series: %d", n)
	}
}

func TestPatchWithoutOperationsIsAllow(t *testing.T) {
	for _, p := range []string{"", "[]", "null"} {
		if r := webhook.Patch([]byte(p)); r.Result != webhook.ResultAllowed {
			t.Errorf("Patch(%q) = %s", p, r.Result)
		}
	}
}

// FuzzDecodeReview: DecodeReview never panics, and what it accepts has a
// request with a UID.
func FuzzDecodeReview(f *testing.F) {
	for _, s := range []string{validReview, `{}`, `null`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"raw":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := webhook.DecodeReview(body)
		if err != nil {
			if !errors.Is(err, webhook.ErrMalformedReview) {
				t.Fatalf("error %v does not wrap ErrMalformedReview", err)
			}
			return
		}
		if r.Request == nil || r.Request.UID == "" {
			t.Fatalf("accepted a review without request or uid: %+v", r)
		}
	})
}
