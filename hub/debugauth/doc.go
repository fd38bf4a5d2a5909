// Package debugauth guards what the hub's monitoring port reveals of the
// mesh (the /debug documents, the fleet console, pprof): a caller must
// present a Kubernetes token that the config cluster's TokenReview accepts
// and whose user a SubjectAccessReview allows to get the resource fleet of
// group meshfed.io (what the hub chart's ClusterRole meshfed-fleet-reader
// grants). A program sends the token as "Authorization: Bearer <token>"; a
// person signs in to the console once, on its login page, and then holds a
// session cookie (HttpOnly, SameSite=Strict, Secure over TLS, expiring)
// whose token stays on the server. Decisions are cached briefly and
// counted; refusals are logged at a bounded rate.
package debugauth
