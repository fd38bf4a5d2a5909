package ca

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
)

// Authentication errors. Every error Authenticate returns wraps exactly one
// of them; IsUnauthenticated tells the caller's fault from the hub's.
var (
	// ErrMissingCredentials means the request carried no bearer token or
	// no ClusterID.
	ErrMissingCredentials = errors.New("ca: missing credentials")
	// ErrUnknownCluster means the ClusterID names no cluster of the fleet
	// (no remote secret defines it).
	ErrUnknownCluster = errors.New("ca: unknown cluster")
	// ErrTokenExpired means the cluster's apiserver found the token
	// expired.
	ErrTokenExpired = errors.New("ca: token expired")
	// ErrWrongAudience means the token is not meant for this CA: none of
	// its audiences is one the CA accepts.
	ErrWrongAudience = errors.New("ca: token audience not accepted")
	// ErrTokenRejected means the cluster's apiserver did not authenticate
	// the token for another reason: a forged or malformed token, one
	// issued by another cluster, or one whose service account or bound
	// object has been deleted.
	ErrTokenRejected = errors.New("ca: token rejected")
	// ErrNotServiceAccount means the token authenticated a user that is
	// not a service account; only service accounts get workload
	// certificates.
	ErrNotServiceAccount = errors.New("ca: not a service account")
	// ErrTokenReview means the cluster's apiserver could not be asked (it
	// is unreachable, or the hub's credentials may not create
	// TokenReviews). It is the hub's failure, not the caller's.
	ErrTokenReview = errors.New("ca: token review failed")
)

// IsUnauthenticated reports whether err means the caller failed to
// authenticate, as opposed to the hub failing to check.
func IsUnauthenticated(err error) bool {
	for _, e := range []error{ErrMissingCredentials, ErrUnknownCluster, ErrTokenExpired,
		ErrWrongAudience, ErrTokenRejected, ErrNotServiceAccount} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// maxTokenBytes bounds the token sent for review. Service account tokens
// are about 1 KiB; the bound keeps a hostile caller from making the hub
// forward megabytes to a remote apiserver.
const maxTokenBytes = 16 << 10

// ClusterConfigs gives the client configuration of any remote cluster of
// the fleet; remotes.Provider implements it. ClusterConfig is called
// concurrently from request handlers and must not block on I/O. The
// returned configuration is not modified.
type ClusterConfigs interface {
	ClusterConfig(model.ClusterID) (*rest.Config, bool)
}

// TokenAuthenticator turns the bearer token of a workload in cluster into
// its identity. Authenticator implements it; the Server takes the
// interface. Authenticate is called concurrently.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, cluster model.ClusterID, token string) (Identity, error)
}

// AuthenticatorOptions configure an Authenticator. DefaultAuthenticatorOptions
// gives the defaults of everything but Clusters.
type AuthenticatorOptions struct {
	// Clusters gives each remote cluster's client configuration. Required.
	Clusters ClusterConfigs
	// Audiences the token must be meant for (any one of them). Default
	// "istio-ca", the audience istio-agent requests for its CA token, so
	// existing sidecars authenticate unchanged.
	Audiences []string
	// CacheTTL is how long a successful review is trusted without asking
	// again, cut to the token's own expiry. Default one minute: long
	// enough that a restarting fleet costs each remote apiserver one
	// review per workload, short enough that a deleted service account
	// stops getting certificates within a minute. Negative disables the
	// cache. Failed reviews are never cached: a token that becomes valid
	// (a service account just created) works at once, and a forged token
	// costs a review each time, bounded by QPS.
	CacheTTL time.Duration
	// CacheSize bounds the cached reviews; the least recently used are
	// evicted. Default 10,000 (about 2 MB), the workloads of a large
	// fleet renewing within CacheTTL.
	CacheSize int
	// ReviewTimeout bounds one TokenReview. Default 10s.
	ReviewTimeout time.Duration
	// QPS and Burst limit the TokenReviews sent to each remote apiserver.
	// Default 100 and 200: a cold start of thousands of workloads is
	// spread over seconds instead of hitting the apiserver at once; the
	// cache makes renewals cheap, so the limit binds only on cold starts
	// and floods of unknown tokens. A negative QPS disables the limit.
	QPS   float32
	Burst int
	// Clock tells the time for the cache. Default the real clock.
	Clock clock.PassiveClock
	// Metrics registers meshfed_ca_token_review_cache_total; nil skips
	// registration.
	Metrics prometheus.Registerer
}

// DefaultAudience is the token audience Istio's CA accepts by default.
const DefaultAudience = "istio-ca"

// DefaultAuthenticatorOptions returns the defaults of AuthenticatorOptions.
func DefaultAuthenticatorOptions() AuthenticatorOptions {
	return AuthenticatorOptions{
		Audiences:     []string{DefaultAudience},
		CacheTTL:      time.Minute,
		CacheSize:     10_000,
		ReviewTimeout: 10 * time.Second,
		QPS:           100,
		Burst:         200,
		Clock:         clock.RealClock{},
	}
}

func (o AuthenticatorOptions) withDefaults() AuthenticatorOptions {
	d := DefaultAuthenticatorOptions()
	if len(o.Audiences) == 0 {
		o.Audiences = d.Audiences
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = d.CacheTTL
	}
	if o.CacheSize == 0 {
		o.CacheSize = d.CacheSize
	}
	if o.ReviewTimeout == 0 {
		o.ReviewTimeout = d.ReviewTimeout
	}
	if o.QPS == 0 {
		o.QPS = d.QPS
	}
	if o.Burst == 0 {
		o.Burst = d.Burst
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	return o
}

// Authenticator authenticates workloads by their Kubernetes service account
// tokens, each reviewed by the apiserver of the cluster that issued it.
// Successful reviews are cached briefly. Safe for concurrent use.
type Authenticator struct {
	opts   AuthenticatorOptions
	cache  *reviewCache
	group  singleflight.Group // one review in flight per token and cluster
	hits   prometheus.Counter
	misses prometheus.Counter

	mu      sync.Mutex // guards clients
	clients map[model.ClusterID]reviewClient
}

// reviewClient is the TokenReview client of one cluster, built from cfg.
type reviewClient struct {
	cfg    *rest.Config
	client authv1client.TokenReviewInterface
}

// NewAuthenticator returns an Authenticator. It does no I/O.
func NewAuthenticator(opts AuthenticatorOptions) (*Authenticator, error) {
	if opts.Clusters == nil {
		return nil, errors.New("ca: AuthenticatorOptions.Clusters is required")
	}
	opts = opts.withDefaults()
	for _, a := range opts.Audiences {
		if a == "" {
			return nil, errors.New("ca: empty audience")
		}
	}
	cacheVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_ca_token_review_cache_total",
		Help: "Token authentications answered from the review cache (hit) or by a TokenReview to the caller's cluster (miss).",
	}, []string{"result"})
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(cacheVec); err != nil {
			return nil, fmt.Errorf("ca: metrics: %w", err)
		}
	}
	size := opts.CacheSize
	if opts.CacheTTL < 0 {
		size = 0
	}
	return &Authenticator{
		opts:    opts,
		cache:   newReviewCache(size),
		hits:    cacheVec.WithLabelValues("hit"),
		misses:  cacheVec.WithLabelValues("miss"),
		clients: map[model.ClusterID]reviewClient{},
	}, nil
}

// Authenticate returns the service account that token authenticates in
// cluster, asking that cluster's apiserver with a TokenReview for the
// configured audiences unless a recent review of the same token is cached.
// Errors wrap one of the package's authentication errors.
func (a *Authenticator) Authenticate(ctx context.Context, cluster model.ClusterID, token string) (Identity, error) {
	switch {
	case cluster == "":
		return Identity{}, fmt.Errorf("%w: no ClusterID metadata", ErrMissingCredentials)
	case token == "":
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrMissingCredentials)
	case len(token) > maxTokenBytes:
		return Identity{}, fmt.Errorf("%w: token of %d bytes, more than %d", ErrTokenRejected, len(token), maxTokenBytes)
	}
	client, err := a.client(cluster)
	if err != nil {
		return Identity{}, err
	}
	key := newReviewKey(cluster, token)
	if id, ok := a.cache.get(key, a.opts.Clock.Now()); ok {
		a.hits.Inc()
		return id, nil
	}
	a.misses.Inc()
	if err := ctx.Err(); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrTokenReview, err)
	}
	// Concurrent requests with the same token share one review. The review
	// outlives a caller that gives up (bounded by ReviewTimeout), so the
	// others still get its answer.
	ch := a.group.DoChan(string(cluster)+"\x00"+string(key.sum[:]), func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.ReviewTimeout)
		defer cancel()
		id, err := a.review(rctx, client, cluster, token)
		if err == nil {
			a.remember(key, id, token)
		}
		return id, err
	})
	select {
	case <-ctx.Done():
		return Identity{}, fmt.Errorf("%w: %w", ErrTokenReview, ctx.Err())
	case r := <-ch:
		if r.Err != nil {
			return Identity{}, r.Err
		}
		return r.Val.(Identity), nil
	}
}

// review asks cluster's apiserver who token authenticates.
func (a *Authenticator) review(ctx context.Context, client authv1client.TokenReviewInterface, cluster model.ClusterID, token string) (Identity, error) {
	res, err := client.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: cluster %s: %w", ErrTokenReview, cluster, err)
	}
	st := res.Status
	if !st.Authenticated {
		return Identity{}, rejection(cluster, st.Error)
	}
	// An apiserver that ignores spec.audiences answers with none; its
	// "yes" would mean the token is good for the apiserver, not for us.
	if !slices.ContainsFunc(st.Audiences, func(s string) bool { return slices.Contains(a.opts.Audiences, s) }) {
		return Identity{}, fmt.Errorf("%w: cluster %s accepted the token for audiences %q, want one of %q",
			ErrWrongAudience, cluster, st.Audiences, a.opts.Audiences)
	}
	id, ok := identityFromUser(cluster, st.User.Username)
	if !ok {
		return Identity{}, fmt.Errorf("%w: cluster %s authenticated %q", ErrNotServiceAccount, cluster, st.User.Username)
	}
	return id, nil
}

// rejection names the cause of a failed review from the apiserver's error
// text, which is passed on whole so the caller can read it.
func rejection(cluster model.ClusterID, reason string) error {
	if reason == "" {
		reason = "not authenticated"
	}
	cause := ErrTokenRejected
	switch lower := strings.ToLower(reason); {
	case strings.Contains(lower, "expired"):
		cause = ErrTokenExpired
	case strings.Contains(lower, "audience"):
		cause = ErrWrongAudience
	}
	return fmt.Errorf("%w: cluster %s: %s", cause, cluster, reason)
}

// remember caches a successful review for CacheTTL, but never past the
// token's own expiry when it can be read.
func (a *Authenticator) remember(key reviewKey, id Identity, token string) {
	if a.opts.CacheTTL < 0 {
		return
	}
	now := a.opts.Clock.Now()
	expires := now.Add(a.opts.CacheTTL)
	if exp, ok := tokenExpiry(token); ok && exp.Before(expires) {
		expires = exp
	}
	if expires.After(now) {
		a.cache.put(key, id, expires)
	}
}

// client returns the TokenReview client of cluster, built anew when the
// cluster's configuration changed (a rotated remote secret).
func (a *Authenticator) client(cluster model.ClusterID) (authv1client.TokenReviewInterface, error) {
	cfg, ok := a.opts.Clusters.ClusterConfig(cluster)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok || cfg == nil {
		delete(a.clients, cluster)
		return nil, fmt.Errorf("%w %q", ErrUnknownCluster, cluster)
	}
	if c, ok := a.clients[cluster]; ok && c.cfg == cfg {
		return c.client, nil
	}
	cp := rest.CopyConfig(cfg)
	cp.QPS, cp.Burst = a.opts.QPS, a.opts.Burst
	cs, err := authv1client.NewForConfig(cp)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster %s client: %w", ErrTokenReview, cluster, err)
	}
	a.clients[cluster] = reviewClient{cfg: cfg, client: cs.TokenReviews()}
	return a.clients[cluster].client, nil
}

// tokenExpiry reads the exp claim of a JWT without verifying it. It only
// shortens how long a review the apiserver already accepted is cached;
// nothing is trusted on its word.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil ||
		math.IsNaN(*claims.Exp) || *claims.Exp <= 0 || *claims.Exp > math.MaxInt32*4 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(*claims.Exp)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}
