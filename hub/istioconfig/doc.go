// Package istioconfig is the hub's watcher of Istio configuration in the
// config cluster: the I/O shell around the pure package pkg/istioconfig.
//
// Every hub replica runs one Watcher. It watches VirtualServices and
// DestinationRules of networking.istio.io/v1 in all namespaces, decodes and
// validates each object's spec (pkg/istioconfig/validate), and hands an
// immutable istioconfig.Snapshot of the valid ones to Options.OnChange.
// The walk-through of one change:
//
//  1. An informer event marks the object's key dirty and wakes the loop.
//  2. The loop (one goroutine) takes every dirty key at once, so a burst of
//     changes is one round. An object whose UID and metadata.generation are
//     those already held is not decoded again: its spec is the same, and
//     the status writes of the hub itself (which bump resourceVersion, not
//     generation) cause no round of OnChange.
//  3. A changed object is decoded strictly and validated. A valid one
//     becomes an istioconfig.VirtualService or DestinationRule; an invalid
//     one is skipped, its cause logged and counted once per generation.
//  4. When an applied object changed, the loop builds a new Snapshot
//     outside its lock and calls OnChange with it, never under a lock.
//  5. The loop compares, for every object, the Reconciled condition it
//     should carry with the one it carries; a differing one whose key
//     Options.WriteStatus accepts is queued for the status writer, a second
//     goroutine that patches the status subresource.
//
// # Why unstructured objects
//
// The objects are watched as unstructured JSON (a controller-runtime cache
// with a static REST mapper, as the hub's remote-cluster watchers use),
// not with istio.io/client-go's typed informers. A typed informer decodes
// a whole list response at once with Istio's generated decoders, and one
// object with a value of the wrong type (the validation webhook can be
// bypassed or absent) fails the decoding of the list: every object of the
// kind would be lost, and the error names no object. Those decoders also
// drop unknown fields silently (AllowUnknownFields), so a misspelt field
// would be applied as if absent. Unstructured, each object decodes on its
// own; validate.DecodeSpec then refuses unknown fields and wrong types with
// the field's path, and the other objects are applied. The static mapper
// means no discovery request: the watcher starts before the CRDs exist and
// its informers list once they do.
//
// # Invalid objects
//
// An invalid object is dropped entirely: the last valid version of it is
// not kept. istiod keeps no earlier version of an object either (it holds
// what the apiserver holds now), and serving yesterday's spec for an object
// whose current spec says otherwise would hide the mistake behind traffic
// that seems right. meshfed_config_rejected_total{kind,reason} counts the
// rejected generations, with reason one of:
//
//	undecodable  the spec is missing, or has an unknown field or a value of the wrong JSON type
//	invalid      the spec decodes, but breaks a rule of validate.Spec
//
// # Status
//
// Each object's status carries Istio's condition shape (type, status,
// reason, message, lastTransitionTime, observedGeneration) with type
// Reconciled, and status.observedGeneration. Reasons:
//
//	Accepted  status True: valid and applied
//	Invalid   status False: refused; the message lists the errors by field path
//	Shadowed  status False: valid, but an older object holds one of its hosts;
//	          the message names the host and that object
//
// The writer patches only the condition list and observedGeneration (JSON
// merge patch on the status subresource, guarded by resourceVersion), so
// other fields and other conditions (e.g. Istio's validationMessages) stay.
// It writes only when what the object carries differs (lastTransitionTime
// aside), which keeps a status write from ever causing another. On a
// conflict it reads the object again and retries; a failure is retried
// later with backoff. meshfed_config_status_writes_total{result} counts
// ok, conflict and error. Options.WriteStatus decides which replica writes
// an object's status (every replica watches every object).
//
// meshfed_config_objects{kind,state} gauges the objects by state (applied,
// rejected, shadowed), and Configz is the /debug/configz document: every
// object with its state, its errors and what shadows it.
package istioconfig
