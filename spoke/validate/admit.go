package validate

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/spoke/webhook"
)

// Validator is the validating admission webhook for Istio configuration.
// It holds no state and calls nothing outside the process.
type Validator struct {
	log logr.Logger
}

// NewValidator returns a Validator.
func NewValidator(log logr.Logger) *Validator { return &Validator{log: log} }

// Admit checks a VirtualService, DestinationRule, ServiceEntry, Sidecar,
// PeerAuthentication or AuthorizationPolicy being created or updated, each
// in its own group and versions (validate.GroupOf, validate.VersionsOf).
// Deletions and other operations are allowed.
func (v *Validator) Admit(_ context.Context, req *admissionv1.AdmissionRequest) webhook.Response {
	k := req.Kind
	if g := validate.GroupOf(k.Kind); g == "" || k.Group != g || !slices.Contains(validate.VersionsOf(k.Kind), k.Version) {
		return webhook.Fail(http.StatusBadRequest, fmt.Errorf("validate: %s/%s %s is not validated here", k.Group, k.Version, k.Kind))
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return webhook.Allow("only creation and update are validated")
	}
	if req.SubResource != "" {
		return webhook.Allow("subresource " + req.SubResource + " is not validated")
	}
	if errs := validate.Object(k.Kind, req.Object.Raw); len(errs) > 0 {
		return webhook.Response{Result: webhook.ResultDenied, Status: invalidStatus(req, errs)}
	}
	return webhook.Allow("valid")
}

// invalidStatus is the Kubernetes way of saying an object is invalid: 422,
// reason Invalid, one cause per field. kubectl prints the message.
func invalidStatus(req *admissionv1.AdmissionRequest, errs validate.ErrorList) *metav1.Status {
	causes := make([]metav1.StatusCause, len(errs))
	for i, e := range errs {
		causes[i] = metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: e.Field, Message: e.Detail}
	}
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: fmt.Sprintf("%s %s is invalid: %s", req.Kind.Kind, objectName(req), errs.Error()),
		Details: &metav1.StatusDetails{Name: req.Name, Group: req.Kind.Group, Kind: req.Kind.Kind, Causes: causes},
	}
}

func objectName(req *admissionv1.AdmissionRequest) string {
	if req.Namespace == "" {
		return req.Name
	}
	return req.Namespace + "/" + req.Name
}
