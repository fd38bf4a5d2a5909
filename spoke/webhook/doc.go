// Package webhook serves Kubernetes admission webhooks over HTTP: it decodes
// an admission.k8s.io/v1 AdmissionReview, hands the request to an Admitter,
// and encodes the Admitter's Response as the review's response, counting
// every request and timing it.
//
// The package is the one place where outside input enters the spoke's
// webhooks, so it is strict about what it accepts and never panics on what
// it is given:
//
//   - A body that is not an AdmissionReview of admission.k8s.io/v1 with a
//     request and a request UID is answered with HTTP 400 and a plain-text
//     message: there is no review to answer in kind.
//   - A review that parses is always answered with HTTP 200 and a review
//     carrying the request's UID; refusals and failures are expressed in
//     the response (Allowed=false with a Status), as the apiserver expects.
//
// DecodeReview is the pure decoding step, fuzzed in this package and through
// the injection handler in package inject.
//
// Every request is counted in meshfed_spoke_webhook_requests_total with the
// webhook's name and the result (allowed, denied, mutated, error), and timed
// in meshfed_spoke_webhook_duration_seconds.
package webhook
