// Package validate is the spoke's validating admission webhook for Istio
// configuration: VirtualService, DestinationRule, ServiceEntry and Sidecar
// in networking.istio.io v1, v1beta1 and v1alpha3, and PeerAuthentication
// and AuthorizationPolicy in security.istio.io v1 and v1beta1.
//
// The checks themselves live in pkg/istioconfig/validate, which the hub
// runs too on what it reads from the config cluster (the webhook can be
// bypassed). Validator adapts them to package webhook: an invalid object is
// denied with HTTP 422, reason Invalid, one StatusCause per field, and a
// message listing every problem, which kubectl shows as it is.
package validate
