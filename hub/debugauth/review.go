package debugauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// FleetAttributes are what a reader of the monitoring port must be allowed:
// get on the resource fleet of group meshfed.io (it need not exist: RBAC
// rules name it, and SubjectAccessReview evaluates them).
var FleetAttributes = authorizationv1.ResourceAttributes{Group: "meshfed.io", Resource: "fleet", Verb: "get"}

// Decision is what a review found of a token.
type Decision struct {
	// Authenticated: the config cluster knows the token.
	Authenticated bool
	// User is the token's user name (when authenticated).
	User string
	// Allowed: the user may read the fleet.
	Allowed bool
	// Reason says why not, for the caller and the log; never the token.
	Reason string
}

// Reviewer decides about tokens.
type Reviewer interface {
	Review(ctx context.Context, token string) (Decision, error)
}

// KubeReviewer asks the config cluster: a TokenReview, then a
// SubjectAccessReview of Attributes for the user it names.
type KubeReviewer struct {
	Client kubernetes.Interface
	// Audiences the token must carry; empty: the apiserver's own.
	Audiences []string
	// Attributes are the access asked; the zero value means
	// FleetAttributes.
	Attributes authorizationv1.ResourceAttributes
}

// Review implements Reviewer. An error means the cluster could not be
// asked (the caller answers 503, not 401).
func (k KubeReviewer) Review(ctx context.Context, token string) (Decision, error) {
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: k.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Decision{}, fmt.Errorf("debugauth: token review: %w", err)
	}
	if !tr.Status.Authenticated {
		reason := "the config cluster does not accept the token"
		if tr.Status.Error != "" {
			reason += ": " + tr.Status.Error
		}
		return Decision{Reason: reason}, nil
	}
	u := tr.Status.User
	attrs := k.Attributes
	if attrs == (authorizationv1.ResourceAttributes{}) {
		attrs = FleetAttributes
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	sar, err := k.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return Decision{}, fmt.Errorf("debugauth: access review of %s: %w", u.Username, err)
	}
	d := Decision{Authenticated: true, User: u.Username, Allowed: sar.Status.Allowed}
	if !d.Allowed {
		d.Reason = fmt.Sprintf("user %s may not %s %s.%s (bind the ClusterRole meshfed-fleet-reader)", u.Username, attrs.Verb, attrs.Resource, attrs.Group)
		if sar.Status.Reason != "" {
			d.Reason += ": " + sar.Status.Reason
		}
	}
	return d, nil
}

// cachingReviewer keeps decisions for ttl (errors are not kept), by the
// token's SHA-256: the token itself is never a map key of the cache.
type cachingReviewer struct {
	next  Reviewer
	ttl   time.Duration
	clock clock.PassiveClock
	max   int
	// counted is called with "hit" or "miss".
	counted func(string)

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cached
}

type cached struct {
	d       Decision
	expires time.Time
}

func newCachingReviewer(next Reviewer, ttl time.Duration, clk clock.PassiveClock, counted func(string)) *cachingReviewer {
	return &cachingReviewer{next: next, ttl: ttl, clock: clk, max: 10_000, counted: counted, entries: map[[sha256.Size]byte]cached{}}
}

func (c *cachingReviewer) Review(ctx context.Context, token string) (Decision, error) {
	key := sha256.Sum256([]byte(token))
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		c.counted("hit")
		return e.d, nil
	}
	c.counted("miss")
	d, err := c.next.Review(ctx, token)
	if err != nil {
		return Decision{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for k, v := range c.entries {
			if !now.Before(v.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries)
		}
	}
	c.entries[key] = cached{d: d, expires: now.Add(c.ttl)}
	return d, nil
}

// errNoToken is a request without credentials.
var errNoToken = errors.New("no credentials: send Authorization: Bearer <a Kubernetes token>, or sign in at /login")
