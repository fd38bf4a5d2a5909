package remotes

import (
	"fmt"
	"strings"
	"time"
)

// AnnotationStaleEndpoints, on a remote secret, says what becomes of the
// endpoints of its clusters while their apiservers do not answer:
// "keep" (the default, as in Istio) serves the last known endpoints
// until the cluster answers again; "drop-after=<duration>" (e.g.
// "drop-after=30s") takes them out of every load assignment once the
// cluster has been unreachable that long, so that traffic fails over to
// other clusters, and brings them back when it answers again.
const AnnotationStaleEndpoints = "meshfed.io/stale-endpoints"

// StalePolicy is a cluster's AnnotationStaleEndpoints. The zero value
// keeps endpoints.
type StalePolicy struct {
	// DropAfter is how long the cluster may be unreachable before its
	// endpoints are dropped; zero keeps them.
	DropAfter time.Duration
}

// String is the annotation's form: "keep" or "drop-after=<duration>".
func (p StalePolicy) String() string {
	if p.DropAfter <= 0 {
		return "keep"
	}
	return "drop-after=" + p.DropAfter.String()
}

// MarshalText writes String.
func (p StalePolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// ParseStalePolicy parses an AnnotationStaleEndpoints value; "" is keep.
func ParseStalePolicy(s string) (StalePolicy, error) {
	switch v := strings.TrimSpace(s); {
	case v == "" || v == "keep":
		return StalePolicy{}, nil
	case strings.HasPrefix(v, "drop-after="):
		d, err := time.ParseDuration(strings.TrimPrefix(v, "drop-after="))
		if err != nil || d <= 0 {
			return StalePolicy{}, fmt.Errorf("remotes: %s %q: want drop-after=<positive duration>, e.g. drop-after=30s", AnnotationStaleEndpoints, s)
		}
		return StalePolicy{DropAfter: d}, nil
	default:
		return StalePolicy{}, fmt.Errorf("remotes: %s %q: want keep or drop-after=<duration>", AnnotationStaleEndpoints, s)
	}
}
