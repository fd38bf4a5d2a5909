package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	kjson "sigs.k8s.io/json"
)

// MaxBodyBytes bounds the size of an AdmissionReview the server reads. The
// apiserver limits objects to about 3 MiB and a review of an UPDATE carries
// the object twice; anything beyond this is not from an apiserver.
const MaxBodyBytes = 8 << 20

// APIVersion and Kind of the only review this package speaks. The webhook
// configurations declare admissionReviewVersions: [v1].
const (
	APIVersion = "admission.k8s.io/v1"
	Kind       = "AdmissionReview"
)

// ErrMalformedReview is wrapped by every DecodeReview error: the body is not
// an admission.k8s.io/v1 AdmissionReview with a request.
var ErrMalformedReview = errors.New("webhook: malformed AdmissionReview")

// Result is how a request ended, the "result" label of the metrics.
type Result string

// Results of a request.
const (
	// ResultAllowed: admitted unchanged.
	ResultAllowed Result = "allowed"
	// ResultDenied: refused because the object is not acceptable.
	ResultDenied Result = "denied"
	// ResultMutated: admitted with a patch.
	ResultMutated Result = "mutated"
	// ResultError: the webhook could not decide (bad request, missing
	// configuration, internal failure).
	ResultError Result = "error"
)

// Response is an Admitter's decision. Build it with Allow, Patch, Deny or
// Fail.
type Response struct {
	// Result classifies the decision for metrics and logs.
	Result Result
	// Patch is a JSONPatch (RFC 6902) to apply to the object; only with
	// ResultMutated.
	Patch []byte
	// Status explains a refusal or failure to the client.
	Status *metav1.Status
	// Reason is a short note for the log of an admitted request, e.g. why
	// a Pod was not injected.
	Reason string
}

// Allow admits the object unchanged; reason is logged.
func Allow(reason string) Response { return Response{Result: ResultAllowed, Reason: reason} }

// Patch admits the object with the JSONPatch p; an empty patch (no
// operations) is Allow.
func Patch(p []byte) Response {
	if len(p) == 0 || string(p) == "[]" || string(p) == "null" {
		return Allow("nothing to change")
	}
	return Response{Result: ResultMutated, Patch: p}
}

// Deny refuses the object: it is not acceptable as it is. code is an HTTP
// status code for the client (400 or 422 mostly) and message says what is
// wrong, precisely enough to fix it.
func Deny(code int32, reason metav1.StatusReason, message string) Response {
	return Response{Result: ResultDenied, Status: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message,
	}}
}

// Fail refuses the object because the webhook could not decide: the
// request was not what this webhook handles, or something it needs is
// missing. The webhook configuration's failurePolicy does not apply (the
// webhook answered), so Fail is for cases where admitting would be wrong.
func Fail(code int32, err error) Response {
	return Response{Result: ResultError, Status: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonInternalError, Message: err.Error(),
	}}
}

// Admitter decides admission requests. Admit is called concurrently, once
// per HTTP request, and must be safe for that. It must answer from what the
// process holds (caches, configuration in memory): it must not call the
// hub, so that admission keeps working when the hub is unreachable.
type Admitter interface {
	Admit(ctx context.Context, req *admissionv1.AdmissionRequest) Response
}

// AdmitterFunc adapts a function to Admitter.
type AdmitterFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) Response

// Admit calls f.
func (f AdmitterFunc) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) Response {
	return f(ctx, req)
}

// DecodeReview parses body as an admission.k8s.io/v1 AdmissionReview that
// carries a request with a UID. Every error wraps ErrMalformedReview.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	// Case-sensitive field names, as the apiserver itself decodes.
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &review); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedReview, err)
	}
	if review.APIVersion != APIVersion || review.Kind != Kind {
		return nil, fmt.Errorf("%w: got apiVersion %q kind %q, want %s %s",
			ErrMalformedReview, review.APIVersion, review.Kind, APIVersion, Kind)
	}
	if review.Request == nil {
		return nil, fmt.Errorf("%w: no request", ErrMalformedReview)
	}
	if review.Request.UID == "" {
		return nil, fmt.Errorf("%w: request has no uid", ErrMalformedReview)
	}
	return &review, nil
}

// EncodeResponse builds the AdmissionReview that answers req with resp.
func EncodeResponse(req *admissionv1.AdmissionRequest, resp Response) *admissionv1.AdmissionReview {
	out := &admissionv1.AdmissionResponse{UID: req.UID}
	switch resp.Result {
	case ResultAllowed:
		out.Allowed = true
	case ResultMutated:
		out.Allowed = true
		out.Patch = resp.Patch
		pt := admissionv1.PatchTypeJSONPatch
		out.PatchType = &pt
	default:
		out.Result = resp.Status
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		Response: out,
	}
}

// Server is the HTTP handler of one webhook.
type Server struct {
	name     string
	admitter Admitter
	metrics  *Metrics
	clock    clock.PassiveClock
	log      logr.Logger
}

// NewServer returns the HTTP handler of the webhook called name ("inject",
// "validate": the "webhook" label of the metrics). metrics may be shared by
// several servers; nil counts nothing. clk times each review for the
// metrics; nil is the real clock.
func NewServer(name string, a Admitter, metrics *Metrics, clk clock.PassiveClock, log logr.Logger) *Server {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Server{name: name, admitter: a, metrics: metrics, clock: clk, log: log.WithValues("webhook", name)}
}

// ServeHTTP answers one AdmissionReview.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	result := s.serve(w, r)
	s.metrics.observe(s.name, result, s.clock.Since(start))
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) Result {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission webhooks take POST", http.StatusMethodNotAllowed)
		return ResultError
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			http.Error(w, fmt.Sprintf("content type %q: want application/json", ct), http.StatusUnsupportedMediaType)
			return ResultError
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		code := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, fmt.Sprintf("reading AdmissionReview: %v", err), code)
		return ResultError
	}
	review, err := DecodeReview(body)
	if err != nil {
		s.log.Info("refusing malformed AdmissionReview", "error", err.Error(), "remote", r.RemoteAddr)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ResultError
	}
	req := review.Request
	resp := s.admit(r.Context(), req)
	log := s.log.WithValues("uid", req.UID, "kind", req.Kind.Kind, "namespace", req.Namespace,
		"name", req.Name, "operation", req.Operation, "result", resp.Result)
	switch resp.Result {
	case ResultAllowed, ResultMutated:
		log.V(1).Info("admitted", "reason", resp.Reason)
	default:
		log.Info("refused", "message", statusMessage(resp.Status))
	}
	out, err := json.Marshal(EncodeResponse(req, resp))
	if err != nil {
		// Unreachable with the types above; answer rather than panic.
		http.Error(w, fmt.Sprintf("encoding AdmissionReview: %v", err), http.StatusInternalServerError)
		return ResultError
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	return resp.Result
}

// admit calls the Admitter, turning a panic into a failure so that one bad
// object cannot take the webhook down.
func (s *Server) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (resp Response) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error(fmt.Errorf("panic: %v", p), "admitter panicked", "uid", req.UID)
			resp = Fail(http.StatusInternalServerError, fmt.Errorf("webhook %s: internal error", s.name))
		}
	}()
	resp = s.admitter.Admit(ctx, req)
	if resp.Result == "" {
		resp = Fail(http.StatusInternalServerError, fmt.Errorf("webhook %s: no decision", s.name))
	}
	if resp.Result != ResultAllowed && resp.Result != ResultMutated && resp.Status == nil {
		resp.Status = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Message: "refused"}
	}
	return resp
}

func statusMessage(st *metav1.Status) string {
	if st == nil {
		return ""
	}
	return st.Message
}
